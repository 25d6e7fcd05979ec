"""The processes the runner starts for user code: each in a session of its own, as
the sandbox's uid, on os.posix_spawn; their groups ended with certainty; the Sweeper that
ends what outlived its execution; and lockdown helpers (lockdown.py under unshare) for
executions whose permissions narrow the file system."""
import _signal
import os
import select
import sys
import threading
import time

from runner_base import (
    DROP_ARGV, GROUP_KILL_SECONDS, HELPER_ENV, HELPER_SECONDS, KERNEL_MEMORY, LOCKDOWN_SCRIPT,
    SANDBOX_GID, SANDBOX_UID, SEPARATED, SIGNAL_NAMES, STATE_DIR, UNSHARE, UNSHARE_ARGS, WORKSPACE, diag,
)
from runner_output import read_available


_spawn_lock = threading.Lock()  # fds made inheritable for one child reach that child only
# The pids of the children the runner started and has not reaped yet (added under
# _spawn_lock, as each is spawned). In the image the runner is the container's init
# (pid 1), so a process whose parent died becomes its child too: one not in this set is
# such an orphan, which the Sweeper ends and reaps.
_children = set()


class Proc:
    """A child process with stdout and stderr pipes (and stdin /dev/null or a pipe), in
    a new session; what subprocess.Popen did for the runner, on os.posix_spawn (a vfork:
    cheap under gVisor, and subprocess with its imports costs every idle sandbox ~1 MB).
    It starts in the runner's cwd, the workspace. Raises OSError like Popen."""

    def __init__(self, argv, env=None, pass_fds=(), stdin_pipe=False):
        fds = []
        try:
            out_r, out_w = os.pipe()
            fds += [out_r, out_w]
            err_r, err_w = os.pipe()
            fds += [err_r, err_w]
            if stdin_pipe:
                in_r, in_w = os.pipe()
                fds += [in_r, in_w]
                stdin = (os.POSIX_SPAWN_DUP2, in_r, 0)
            else:
                stdin = (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0)
            actions = [stdin, (os.POSIX_SPAWN_DUP2, out_w, 1), (os.POSIX_SPAWN_DUP2, err_w, 2)]
            argv = DROP_ARGV + list(argv)  # setpriv drops to the sandbox uid, then execs argv
            spawn_fn = os.posix_spawn if '/' in argv[0] else os.posix_spawnp
            with _spawn_lock:
                for fd in pass_fds:
                    os.set_inheritable(fd, True)
                try:
                    # SIGPIPE and SIGXFSZ back to their defaults (Python ignores SIGPIPE).
                    self.pid = spawn_fn(argv[0], argv, os.environ if env is None else env, file_actions=actions,
                                        setsid=True, setsigdef=(_signal.SIGPIPE, _signal.SIGXFSZ))
                    _children.add(self.pid)
                finally:
                    for fd in pass_fds:
                        os.set_inheritable(fd, False)
        except BaseException:
            for fd in fds:
                os.close(fd)
            raise
        os.close(out_w)
        os.close(err_w)
        self.stdout, self.stderr = out_r, err_r
        self.stdin = None
        if stdin_pipe:
            os.close(in_r)
            self.stdin = in_w
        self.returncode = None

    def poll(self):
        if self.returncode is None:
            try:
                pid, status = os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:
                _children.discard(self.pid)
                return self.returncode
            if pid:
                _children.discard(self.pid)
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self):
        if self.returncode is None:
            try:
                _, status = os.waitpid(self.pid, 0)
                self.returncode = os.waitstatus_to_exitcode(status)
            except ChildProcessError:
                pass
            _children.discard(self.pid)
        return self.returncode

    def write_stdin(self, data):
        """Writes data to its stdin pipe and closes it. Raises OSError (it died)."""
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(self.stdin, view):]
        finally:
            self.close_stdin()

    def close_stdin(self):
        if self.stdin is not None:
            os.close(self.stdin)
            self.stdin = None

    def close(self):
        """Closes the runner's ends of the pipes."""
        self.close_stdin()
        for fd in (self.stdout, self.stderr):
            if fd is not None:
                os.close(fd)
        self.stdout = self.stderr = None


def has_exited(proc):
    """True once proc has exited, WITHOUT reaping it: until we wait() for it its pid
    (which is also its process group id) cannot be recycled, so a later killpg cannot
    hit a stranger."""
    try:
        return os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:
        return True
    except OSError:
        return proc.poll() is not None


def kill_group(pgid):
    try:
        os.killpg(pgid, _signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def end_group(proc, limit=GROUP_KILL_SECONDS):
    """SIGKILLs proc's process group, reaps proc (its leader) and returns its status;
    then kills the group again until no member is left: a member that was forking
    during a kill (a fork loop) may have left a child. The group id cannot be recycled
    while the group has members, and the leader's zombie no longer counts once reaped."""
    kill_group(proc.pid)
    status = proc.wait()
    deadline = time.monotonic() + limit
    while True:
        try:
            os.killpg(proc.pid, _signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            return status
        # Members whose parent died are the runner's children now (it is the container's
        # init), and a dead member stays in the group until reaped.
        reap_group(proc.pid)
        if time.monotonic() > deadline:
            diag('process group %d still has members after %g s' % (proc.pid, limit))
            return status
        time.sleep(0.002)


def reap_group(pgid):
    """Reaps the dead members of group `pgid` that are the runner's children: orphans it
    inherited, never one it started (each of those leads a group of its own)."""
    while True:
        try:
            pid, _ = os.waitpid(-pgid, os.WNOHANG)
        except ChildProcessError:
            return
        if not pid:
            return
        _children.discard(pid)


def set_nonblocking(*fds):
    for fd in fds:
        os.set_blocking(fd, False)


def signal_name(signum):
    return SIGNAL_NAMES.get(signum) or 'signal %d' % signum


def kernel_memory_limit():
    if KERNEL_MEMORY is not None:
        try:
            return max(0, int(KERNEL_MEMORY))
        except ValueError:
            diag('ignoring SANDGATE_KERNEL_MEMORY=%r' % KERNEL_MEMORY)
    try:
        with open('/proc/meminfo') as f:
            for line in f:
                if line.startswith('MemTotal:'):
                    return int(line.split()[1]) * 1024 * 3 // 4
    except (OSError, ValueError, IndexError):
        pass
    return 0


class NarrowingError(Exception):
    """An execution's `fs` narrowing could not be applied; nothing was run."""

    def __init__(self, message, refused=False):
        super().__init__(message)
        self.refused = refused  # by lockdown.py itself (not: its helper died)


def process_table(orphans=None):
    """(pid, session) of every live process of the sandbox user, but the runner's own
    children (each of which it started, waits for and ends itself). The orphans the
    runner inherited as init go to `orphans`, as (pid, dead)."""
    with _spawn_lock:  # so that a child just started is already known
        return _process_table(orphans)


def _process_table(orphans):
    own = os.getpid()
    table = []
    for name in os.listdir('/proc'):
        if not name.isdigit() or int(name) == own:
            continue
        try:
            # The real uid from status, not the owner of /proc/<pid>: gVisor shows a leader
            # whose threads live on without it (no address space) as root's.
            with open('/proc/%s/status' % name, 'rb') as f:
                status = f.read()
            if int(status.split(b'\nUid:', 1)[1].split()[0]) != SANDBOX_UID:
                continue
            with open('/proc/%s/stat' % name, 'rb') as f:
                stat = f.read()
            fields = stat[stat.rfind(b')') + 2:].split()
            ours = int(fields[1]) == own
            if ours and int(name) in _children:
                continue  # the runner's own child
            # Dead, waiting to be reaped; unless its threads live on after the leader
            # exited alone (a zombie leader whose process still runs: under gVisor it has
            # no task folder then, but status counts its threads).
            threads = int(status.split(b'\nThreads:', 1)[1].split()[0]) if b'\nThreads:' in status else 1
            dead = fields[0] in (b'Z', b'X') and threads <= 1
            if ours and orphans is not None:
                orphans.append((int(name), dead))
            if dead:
                continue
            table.append((int(name), int(fields[3])))
        except (OSError, ValueError, IndexError):
            continue
    return table


class Sweeper:
    """Ends every process that outlived the execution that started it.

    Each process the runner starts leads a session of its own (`setsid`): the Python
    kernel, an execution's process, a lockdown helper. What an execution starts stays in
    its session unless it detaches (`setsid`, a daemon's double fork), and killing the
    execution's process group does not reach what detached. After every execution, every
    process whose session is not one the runner keeps (the persistent kernel's, the spare
    helpers') is killed: so processes started from Python that did not
    detach live on with the kernel, like a notebook's, and nothing else survives its
    execution. Narrowed executions are covered too: their processes, in a pid namespace
    of their own, are in their helper's session.

    The runner's own children are never strays (it waits for each of them). Orphans it
    inherited as the container's init are, and once dead they are reaped here.
    When /proc lists exactly the processes of the last clean sweep, nothing is read."""

    def __init__(self):
        self.clean = None

    def sweep(self, keep, limit=GROUP_KILL_SECONDS):
        """Kills strays until none is left (or `limit` seconds passed); returns how many
        processes it killed."""
        deadline = time.monotonic() + limit
        killed = set()
        while True:
            pids = frozenset(name for name in os.listdir('/proc') if name.isdigit())
            if pids == self.clean:
                return len(killed)
            orphans = []
            strays = [pid for pid, session in process_table(orphans) if session not in keep and pid not in keep]
            for pid in strays:
                try:
                    os.kill(pid, _signal.SIGKILL)
                    killed.add(pid)
                except OSError:
                    pass
            for pid, dead in orphans:
                if dead:
                    try:
                        os.waitpid(pid, os.WNOHANG)
                    except ChildProcessError:
                        pass
            if not strays:
                # One that lives on (in a kept session) will die unseen by the fast path.
                if not orphans:
                    self.clean = pids
                return len(killed)
            if time.monotonic() > deadline:
                diag('%d processes of finished executions are still alive' % len(strays))
                return len(killed)
            time.sleep(0.002)


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


def read_line(fd, seconds):
    """Bytes from fd up to and including the first newline (or EOF); and whether time ran out."""
    data = b''
    deadline = time.monotonic() + seconds
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    while not data.endswith(b'\n'):
        left = deadline - time.monotonic()
        if left <= 0 or not poller.poll(left * 1000):
            return data, True
        chunk = os.read(fd, 4096)
        if not chunk:
            break
        data += chunk
    return data, False


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


def describe_status(status):
    if status is None:
        return 'unknown status'
    if status < 0:
        return 'killed by %s%s' % (signal_name(-status), ', perhaps out of memory' if -status == _signal.SIGKILL else '')
    return 'exit code %d' % status
