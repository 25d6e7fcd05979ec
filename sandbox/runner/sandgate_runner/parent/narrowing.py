"""Executions whose request narrows the file system (`fs`): lockdown helpers
(helper/lockdown.py under unshare), started ahead of need when they can be, each of
which takes one request and becomes that execution's process; and spawn(), which starts
an execution's process, through a helper when it is narrowed."""
import os
import sys
import time

from .output import read_available
from .procs import Proc, describe_status, end_group, has_exited, read_line, set_nonblocking
from .settings import (
    HELPER_ENV, HELPER_SECONDS, LOCKDOWN_SCRIPT, SANDBOX_GID, SANDBOX_UID, SEPARATED, STATE_DIR, UNSHARE,
    UNSHARE_ARGS, WORKSPACE,
)


class NarrowingError(Exception):
    """An execution's `fs` narrowing could not be applied; nothing was run."""

    def __init__(self, message, refused=False):
        super().__init__(message)
        self.refused = refused  # by lockdown.py itself (not: its helper died)


class Helper:
    """lockdown.py's helper under unshare(1), in new user, mount and pid namespaces.
    It takes one request and becomes that execution's process (see lockdown.py); it
    can be started ahead of time, since all its slow work comes before the request."""

    def __init__(self, pass_fds=()):
        status_r, status_w = os.pipe()
        try:
            self.proc = Proc([UNSHARE] + UNSHARE_ARGS + [sys.executable, '-I', '-S', LOCKDOWN_SCRIPT, 'serve',
                                                         str(status_w)],
                             HELPER_ENV, pass_fds=(status_w,) + tuple(pass_fds), stdin_pipe=True)
        except BaseException:
            os.close(status_r)
            raise
        finally:
            os.close(status_w)
        self.status_r = status_r
        self.since = time.monotonic()

    def usable(self):
        return not has_exited(self.proc)

    def hand_over(self, argv, env, fs):
        """Sends the request; returns the Proc (now the execution's process) once the
        helper has narrowed itself and is about to exec. Raises NarrowingError."""
        # The helper maps the uid it was started as (the sandbox uid) back inside.
        uid, gid = (SANDBOX_UID, SANDBOX_GID) if SEPARATED else (os.getuid(), os.getgid())
        req = {'argv': argv, 'env': ['%s=%s' % kv for kv in env.items()], 'cwd': WORKSPACE, 'uid': uid,
               'gid': gid, 'readOnly': fs.get('readOnly') or [], 'hidden': fs.get('hidden') or [],
               'protect': [STATE_DIR] + deno_dirs(env)}
        try:
            self.proc.write_stdin(encode_request(req))
        except OSError:
            pass  # it died: the status says so
        status, timed_out = read_line(self.status_r, HELPER_SECONDS)
        os.close(self.status_r)
        self.status_r = None
        if status == b'go\n':
            return self.proc
        text = status.decode('utf-8', 'replace').strip()
        self.discard()
        if text.startswith('error: '):
            raise NarrowingError(text[7:], refused=True)
        problem = 'did not answer in %d s' % HELPER_SECONDS if timed_out else 'ended (%s)' % describe_status(
            self.proc.returncode)
        raise NarrowingError('the lockdown helper %s%s' % (problem, ': ' + self.stderr if self.stderr else ''))

    def discard(self):
        end_group(self.proc)
        err = bytearray()
        set_nonblocking(self.proc.stderr)
        read_available({self.proc.stderr: 'stderr'}, _Collect(err))
        self.stderr = err.decode('utf-8', 'replace').strip()[-500:]
        self.proc.close()
        if self.status_r is not None:
            os.close(self.status_r)
            self.status_r = None


class _Collect:
    def __init__(self, buf):
        self.buf = buf

    def feed(self, name, data):
        self.buf += data


def encode_request(req):
    """lockdown.py's request format (see there; not imported: it loads ctypes)."""
    parts = []
    for key, value in req.items():
        values = value if isinstance(value, list) else [str(value)]
        parts += [key, str(len(values))] + values
    body = '\0'.join(parts).encode('utf-8', 'surrogateescape')
    return b'%d\n' % len(body) + body


def deno_dirs(env=None):
    """Deno's cache folders (DENO_DIR: the sandbox's and an execution's own). A narrowed
    execution gets them read-only: Deno runs code from them (compiled code, modules)
    in later executions, which may have wider permissions. Deno works without writing
    them."""
    dirs = []
    for d in (os.environ.get('DENO_DIR'), (env or {}).get('DENO_DIR')):
        if d and os.path.isabs(d) and d not in dirs:
            dirs.append(d)
    return dirs


def make_deno_dirs():
    """Makes Deno's cache folders at start, so that a narrowed execution finds them
    there to be made read-only (one it made itself would be its own)."""
    for d in deno_dirs():
        if not os.path.isdir(d):
            os.makedirs(d, exist_ok=True)
            os.chmod(d, 0o777)  # the runner's (it may not chown); the sandbox user writes in it


def spawn(argv, env, fs=None, pass_fds=(), spares=None):
    """An execution's process: stdin /dev/null, stdout and stderr pipes, its own session,
    the workspace as cwd. With `fs` it runs narrowed, through a lockdown helper (one from
    `spares`, a list of helpers started ahead, when there is one). Raises NarrowingError
    or OSError."""
    if not fs:
        return Proc(argv, env, pass_fds)
    env = dict(os.environ) if env is None else env
    if spares and not pass_fds:
        helper = spares.pop()
        if helper.usable():
            try:
                return helper.hand_over(argv, env, fs)
            except NarrowingError as exc:
                if exc.refused:
                    raise  # a fresh helper would refuse the same
        else:
            helper.discard()
    helper = Helper(pass_fds)
    return helper.hand_over(argv, env, fs)


