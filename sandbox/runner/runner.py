#!/usr/bin/env python3
"""sandgate runner: the long-lived process inside a user's sandbox container.

Requests arrive on stdin and events leave on stdout, one JSON object per line (see
PROTOCOL.md and src/sandboxes/protocol.ts). stdout carries only protocol lines; every
diagnostic goes to stderr.

Threads:
  main    reads stdin and dispatches; ping, cancel and call_result are answered at once
  worker  runs executions and preloads one at a time, in arrival order
  bridge  serves the Unix socket through which sandboxed code calls the gateway
  probe   finds Deno's version once, after start (so `ready` is not delayed by it)

Python runs in a kernel child process (kernel.py) that keeps its state between
executions; bash, TypeScript and JavaScript run as a fresh process each time. Every
process runs in its own session, so a timeout or cancel SIGKILLs its whole group. An
execution whose request narrows the file system (`fs`) runs through lockdown.py, in
namespaces of its own under a seccomp filter; narrowed Python gets a one-shot kernel.

Standard library only. Paths can be moved for tests: SANDGATE_WORKSPACE, SANDGATE_TMP,
SANDGATE_BRIDGE, SANDGATE_DENO, SANDGATE_UNSHARE; SANDGATE_KERNEL_MEMORY sets the kernel's
memory limit.

Memory: an idle sandbox keeps this process and the kernel for its whole life, so both
stay small. Started as a script, runner.py only compiles its own modules into a
bytecode cache and re-executes itself as `python3 -I -S` loading them from there
(sandgate_boot.py): compiling this file in the process that stays would leave ~4 MB
behind, 1 MB for kernel.py, which every kernel loads the same way. -I -S: no site, no
.pth files. The runner uses the C modules under json, socket and signal directly
(sandgate_wire.py, _socket, _signal: the Python layers would load re and enum), starts
processes with os.posix_spawn instead of subprocess, and hands freed heap back to the
system (malloc_trim) once started and whenever it has been idle for a second after a job.
"""
import os
import sys

RUNNER_DIR = os.path.dirname(os.path.abspath(__file__))
TMP = os.environ.get('SANDGATE_TMP') or '/tmp'
STATE_DIR = os.path.join(TMP, '.sandgate')
PYCACHE = os.path.join(STATE_DIR, 'pycache')
# Not lockdown.py: code in the sandbox can write this cache (same uid), and the lockdown
# helper runs before the lockdown it applies; it is compiled from its read-only source.
OWN_MODULES = ('runner', 'kernel', 'sandgate_wire')

if __name__ == '__main__':
    # First stage (see sandgate_boot.py): fill the bytecode cache, then become the runner.
    sys.path.insert(0, RUNNER_DIR)
    import sandgate_boot
    try:
        # Readable by the uid user code runs as (kernels load from it), writable by us only.
        os.makedirs(PYCACHE, mode=0o755, exist_ok=True)
        problems = sandgate_boot.write_cache(PYCACHE, OWN_MODULES)
    except OSError as exc:
        problems = [str(exc)]
    for problem in problems:
        sys.stderr.write('[runner] no bytecode cache for %s\n' % problem)
    os.execv(sys.executable, [sys.executable, '-I', '-S', '-c', sandgate_boot.command(PYCACHE, 'runner')]
             + sys.argv[1:])

import _signal  # noqa: E402
import _socket  # noqa: E402
import codecs  # noqa: E402
import select  # noqa: E402
import selectors  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402
from collections import deque  # noqa: E402

if RUNNER_DIR not in sys.path:
    sys.path.insert(0, RUNNER_DIR)
import sandgate_boot  # noqa: E402
import sandgate_wire as wire  # noqa: E402

WORKSPACE = os.path.abspath(os.environ.get('SANDGATE_WORKSPACE') or '/workspace')
BRIDGE_PATH = os.environ.get('SANDGATE_BRIDGE') or os.path.join(STATE_DIR, 'bridge.sock')
DENO = os.environ.get('SANDGATE_DENO') or '/usr/local/bin/deno'
BASH = '/bin/bash'
# The kernel's address-space limit (RLIMIT_AS), so that a huge allocation raises
# MemoryError instead of exhausting the container: under gVisor the container is
# killed as a whole when it runs out of memory, taking the runner with it.
# Default: 75% of MemTotal (gVisor shows the container's --memory there); 0: no limit.
KERNEL_MEMORY = os.environ.get('SANDGATE_KERNEL_MEMORY')
UNSHARE = os.environ.get('SANDGATE_UNSHARE') or '/usr/bin/unshare'
SETPRIV = os.environ.get('SANDGATE_SETPRIV') or '/usr/bin/setpriv'
# Every process the runner starts for user code (kernels, executions, lockdown helpers)
# runs as this uid:gid with no capability. The runner itself runs as root inside gVisor
# with only SETUID, SETGID and KILL (the container grants no more), so code cannot open
# its descriptors through /proc (the protocol stream), trace it or signal it: being the
# same uid would be enough for all three, and gVisor does not protect /proc/<pid>/fd of a
# non-dumpable process. Both this and the sweep of stray processes (Sweeper) act only in
# a sandbox: the image starts the runner with --in-sandbox. Elsewhere (the unit tests, on
# a host) the runner runs code as itself and never looks at other processes.
IN_SANDBOX = '--in-sandbox' in sys.argv[1:]
RUN_AS = os.environ.get('SANDGATE_RUN_AS') or '1000:1000'
SANDBOX_UID, SANDBOX_GID = (int(part) for part in RUN_AS.split(':'))
SEPARATED = IN_SANDBOX and os.getuid() == 0 and SANDBOX_UID != 0
DROP_ARGV = ([SETPRIV, '--reuid=%d' % SANDBOX_UID, '--regid=%d' % SANDBOX_GID, '--clear-groups',
              '--inh-caps=-all', '--'] if SEPARATED else [])
# As lockdown.UNSHARE_ARGS (not imported here: lockdown.py loads ctypes).
UNSHARE_ARGS = ['--user', '--map-root-user', '--mount', '--pid', '--fork', '--mount-proc', '--kill-child']
HELPER_ENV = {'PATH': '/usr/local/bin:/usr/bin:/bin', 'LANG': 'C.UTF-8'}
# kernel.py runs as __main__, as if started as a script, but from the bytecode cache.
KERNEL_BOOT = sandgate_boot.command(PYCACHE, 'kernel', as_main=True)
LOCKDOWN_SCRIPT = os.path.join(RUNNER_DIR, 'lockdown.py')
# The runner's state folder (scripts, the bridge socket, the bytecode cache): user code
# may read it (scripts, kernel code) but never write it when it runs as another uid.
STATE_DIR_MODE = 0o755 if SEPARATED else 0o700
FIGURE_DIR = os.path.join(WORKSPACE, 'figures')

LANGUAGES = ('python', 'typescript', 'javascript', 'bash')
DEFAULT_TIMEOUT_MS = 30_000
DEFAULT_OUTPUT_LIMIT = 1 << 20
FLUSH_SECONDS = 0.02      # output is batched: sent after 20 ms ...
FLUSH_BYTES = 4096        # ... or once 4 KB are pending
READ_CHUNK = 65536
MAX_KERNEL_REPLY = 1 << 20  # longest reply line taken from a kernel
MAX_RESULT_CHARS = 4200     # a result repr: kernel.py cuts at 4096 and says how much more
SCAN_LIMIT = 20_000       # workspace entries looked at per snapshot
SCAN_MAX_DEPTH = 64       # folders nested deeper are not looked into
SCAN_MAX_SECONDS = 0.5    # a snapshot stops after this long
MAX_FILE_CHANGES = 1000   # file changes listed in one `done`
KERNEL_BOOT_SECONDS = 120
PRELOAD_SECONDS = 300
HELPER_SECONDS = 30       # a lockdown helper must be narrowed and exec'ing within this
SPARE_IDLE_SECONDS = 120  # a helper started ahead is dropped after this long unused
DRAIN_GRACE = 0.2         # after a process ended: how long to wait for more output
DRAIN_MAX = 0.5           # ... and at most this long in all
GROUP_KILL_SECONDS = 2.0  # how long to keep killing a process group that still has members

TRIM_IDLE_SECONDS = 1.0   # idle this long after a job: return freed heap to the system
SIGNAL_NAMES = {}         # number -> name, as signal.Signals(n).name gives it
for _name in sorted(vars(_signal)):
    if _name.startswith('SIG') and not _name.startswith('SIG_') and isinstance(getattr(_signal, _name), int):
        SIGNAL_NAMES.setdefault(getattr(_signal, _name), _name)
NARROWING_FAILED = 'The narrowed permissions of this execution could not be applied, so it did not run: %s'
SEPARATE_KERNEL = ('This execution ran in a separate Python interpreter because its permissions are narrowed:'
                   ' variables and imports of earlier executions are not visible to it, and nothing it defined'
                   ' is kept.')


def diag(message):
    """A diagnostic for whoever reads the container's stderr (never the protocol)."""
    try:
        sys.stderr.write('[runner] %s\n' % message)
        sys.stderr.flush()
    except (OSError, ValueError):
        pass


def json_line(obj):
    """One protocol line. Lone surrogates (from a client's JSON) fall back to \\u escapes."""
    try:
        return wire.dumps(obj).encode('utf-8') + b'\n'
    except UnicodeEncodeError:
        return wire.dumps(obj, ascii=True).encode('ascii') + b'\n'


class Emitter:
    """Writes events to the protocol stream; safe to call from any thread."""

    def __init__(self, stream):
        self._stream = stream
        self._lock = threading.Lock()

    def emit(self, event):
        line = json_line(event)
        with self._lock:
            try:
                self._stream.write(line)
                self._stream.flush()
            except (OSError, ValueError):
                pass  # the gateway is gone; stdin EOF ends the runner

    def log(self, level, message):
        self.emit({'type': 'log', 'level': level, 'message': message})


# ---------------------------------------------------------------------------- output


def utf8_cut(data, n):
    """The largest k <= n such that data[:k] does not end inside a UTF-8 character."""
    k = n
    while k > 0 and k < len(data) and (data[k] & 0xC0) == 0x80:
        k -= 1
    return k


class StreamCapture:
    """One stream of one execution: keeps at most `limit` bytes, decodes UTF-8 across
    chunk boundaries and holds text until it is due to be sent."""

    def __init__(self, limit):
        self.limit = limit
        self.kept = 0
        self.truncated = 0
        self.full = False
        self.decoder = codecs.getincrementaldecoder('utf-8')('replace')
        self.pending = []
        self.pending_bytes = 0
        self.since = 0.0

    def feed(self, data, now):
        if self.full:
            self.truncated += len(data)
            return
        room = self.limit - self.kept
        if len(data) > room:
            cut = utf8_cut(data, room)
            self.truncated += len(data) - cut
            data = data[:cut]
            self.full = True
        self.kept += len(data)
        text = self.decoder.decode(data)
        if text:
            if not self.pending:
                self.since = now
            self.pending.append(text)
            self.pending_bytes += len(data)

    def take(self, final=False):
        if final:
            tail = self.decoder.decode(b'', final=True)
            if tail:
                self.pending.append(tail)
        text = ''.join(self.pending)
        self.pending.clear()
        self.pending_bytes = 0
        return text


class Output:
    """Both streams of one execution, batched into `stdout` / `stderr` events."""

    def __init__(self, emitter, exec_id, limit):
        self.emitter = emitter
        self.exec_id = exec_id
        self.streams = {'stdout': StreamCapture(limit), 'stderr': StreamCapture(limit)}

    def feed(self, name, data):
        cap = self.streams[name]
        cap.feed(data, time.monotonic())
        if cap.pending_bytes >= FLUSH_BYTES:
            self._send(name)

    def flush_due(self, now):
        for name, cap in self.streams.items():
            if cap.pending and now - cap.since >= FLUSH_SECONDS:
                self._send(name)

    def wait_hint(self, now):
        """Seconds until the next batch is due, or None when nothing is pending."""
        waits = [cap.since + FLUSH_SECONDS - now for cap in self.streams.values() if cap.pending]
        return max(0.0, min(waits)) if waits else None

    def _send(self, name, final=False):
        text = self.streams[name].take(final)
        if text:
            self.emitter.emit({'type': name, 'id': self.exec_id, 'data': text})

    def finish(self):
        """Sends what is left and, if anything was dropped, a final notice on stderr."""
        for name in self.streams:
            self._send(name, final=True)
        out, err = self.truncated()['stdout'], self.truncated()['stderr']
        if out or err:
            detail = ' (stdout %d, stderr %d)' % (out, err) if out and err else ''
            notice = '\n[sandgate: output truncated, %d bytes not shown%s]\n' % (out + err, detail)
            self.emitter.emit({'type': 'stderr', 'id': self.exec_id, 'data': notice})

    def truncated(self):
        return {name: cap.truncated for name, cap in self.streams.items()}


class DiagSink:
    """Stands in for Output when a kernel writes outside an execution (boot, preload)."""

    def feed(self, name, data):
        diag('kernel %s: %s' % (name, data.decode('utf-8', 'replace').rstrip()))

    def flush_due(self, now):
        pass

    def wait_hint(self, now):
        return None


class Discard(DiagSink):
    def feed(self, name, data):
        pass


# ---------------------------------------------------------------------------- files


class Scan:
    """A workspace snapshot: regular files as {relative path: (size, mtime_ns)}, and why
    the scan stopped early, if it did ('entries', 'time'; 'depth' when it skipped folders
    nested too deep, which it does the same way every time)."""
    __slots__ = ('files', 'stopped', 'depth_cut')

    def __init__(self):
        self.files = {}
        self.stopped = None
        self.depth_cut = False

    @property
    def partial(self):
        """Whether files may be missing that a full scan would have found at random, so
        that deletions cannot be told apart (a depth cut always skips the same folders)."""
        return self.stopped is not None


_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def snapshot(root, limit=SCAN_LIMIT, max_depth=SCAN_MAX_DEPTH, max_seconds=SCAN_MAX_SECONDS):
    """Scans the regular files under root, bounded by entries, folder depth and time.

    Folders are opened relative to their parent's descriptor (never by path, never
    through a symlink), so a deep tree costs one open per folder instead of a path walk
    per entry, and a folder swapped for a symlink is skipped. Directories are read in
    name order, so a scan capped by entries always covers the same prefix."""
    scan = Scan()
    deadline = time.monotonic() + max_seconds
    seen = [0]

    def walk(dir_fd, rel, depth):
        try:
            with os.scandir(dir_fd) as it:
                entries = sorted(it, key=lambda e: e.name)
        except OSError:
            return
        for entry in entries:
            seen[0] += 1
            if seen[0] > limit:
                scan.stopped = 'entries'
                return
            if not seen[0] & 255 and time.monotonic() > deadline:
                scan.stopped = 'time'
                return
            path = rel + '/' + entry.name if rel else entry.name
            try:
                if entry.is_dir(follow_symlinks=False):
                    if depth >= max_depth:
                        scan.depth_cut = True
                        continue
                    fd = os.open(entry.name, _DIR_FLAGS, dir_fd=dir_fd)
                    try:
                        walk(fd, path, depth + 1)
                    finally:
                        os.close(fd)
                    if scan.stopped:
                        return
                elif entry.is_file(follow_symlinks=False):
                    st = entry.stat(follow_symlinks=False)
                    scan.files[path] = (st.st_size, st.st_mtime_ns)
            except OSError:
                continue

    try:
        top = os.open(root, _DIR_FLAGS)
    except OSError:
        return scan
    try:
        walk(top, '', 0)
    finally:
        os.close(top)
    return scan


def scan_notice(before, after):
    """What the result says about scans that stopped early, or None."""
    reasons = []
    for stopped in ('entries', 'time'):
        if stopped in (before.stopped, after.stopped):
            reasons.append({'entries': 'it holds more than %d entries' % SCAN_LIMIT,
                            'time': 'scanning it took more than %g s' % SCAN_MAX_SECONDS}[stopped])
    if reasons:
        return ('The workspace scan stopped early (%s): file changes are listed for the part it covered, '
                'and deletions are not listed.' % ' and '.join(reasons))
    if before.depth_cut or after.depth_cut:
        return ('Folders nested more than %d levels deep in /workspace were not scanned: changes inside them '
                'are not listed.' % SCAN_MAX_DEPTH)
    return None


def file_changes(before, after, partial):
    """FileChange list; deletions are left out when a scan was partial (they could be
    files the capped scan merely did not reach)."""
    changes = []
    for path, (size, mtime) in after.items():
        old = before.get(path)
        if old is None:
            changes.append({'path': path, 'size': size, 'change': 'created'})
        elif old != (size, mtime):
            changes.append({'path': path, 'size': size, 'change': 'modified'})
    if not partial:
        for path in before.keys() - after.keys():
            changes.append({'path': path, 'size': 0, 'change': 'deleted'})
    changes.sort(key=lambda c: c['path'])
    return changes


# ---------------------------------------------------------------------------- processes


_spawn_lock = threading.Lock()  # fds made inheritable for one child reach that child only


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
                return self.returncode
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self):
        if self.returncode is None:
            try:
                _, status = os.waitpid(self.pid, 0)
                self.returncode = os.waitstatus_to_exitcode(status)
            except ChildProcessError:
                pass
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
        if time.monotonic() > deadline:
            diag('process group %d still has members after %g s' % (proc.pid, limit))
            return status
        time.sleep(0.002)  # killed members are reaped by init


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


def _process_table():
    """(pid, session) of every live process of the sandbox user, but the runner's own
    children (each of which it started, waits for and ends itself)."""
    own = os.getpid()
    table = []
    for name in os.listdir('/proc'):
        if not name.isdigit() or name == '1' or int(name) == own:
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
            if int(fields[1]) == own:
                continue  # the runner's own child
            # Dead, waiting to be reaped; unless its threads live on after the leader
            # exited alone (a zombie leader whose process still runs: under gVisor it has
            # no task folder then, but status counts its threads).
            threads = int(status.split(b'\nThreads:', 1)[1].split()[0]) if b'\nThreads:' in status else 1
            if fields[0] in (b'Z', b'X') and threads <= 1:
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

    The runner's own children are never strays (it waits for each of them).
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
            strays = [pid for pid, session in _process_table() if session not in keep and pid not in keep]
            if not strays:
                self.clean = pids
                return len(killed)
            if time.monotonic() > deadline:
                diag('%d processes of finished executions are still alive' % len(strays))
                return len(killed)
            for pid in strays:
                try:
                    os.kill(pid, _signal.SIGKILL)
                    killed.add(pid)
                except OSError:
                    pass
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
               'protect': [STATE_DIR]}
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


class Kernel:
    """The Python kernel child and the pipes to it. Used by the worker thread only."""

    def __init__(self, fs=None):
        self.proc = None
        self.ready = False
        self.preloaded = []  # modules imported again after a restart
        self.fs = fs         # narrowed (a one-shot kernel for one execution)

    @property
    def alive(self):
        return self.proc is not None

    def start(self):
        req_r, req_w = os.pipe()
        rep_r, rep_w = os.pipe()
        try:
            self.proc = spawn(
                [sys.executable, '-u', '-c', KERNEL_BOOT, str(req_r), str(rep_w), wire.dumps(self.preloaded),
                 str(kernel_memory_limit())], None, fs=self.fs, pass_fds=(req_r, rep_w))
        except BaseException:
            os.close(req_w)
            os.close(rep_r)
            raise
        finally:
            os.close(req_r)
            os.close(rep_w)
        self.req_w, self.rep_r = req_w, rep_r
        self.rep_buf = bytearray()
        self.rep_skip = False
        self.ready = False
        set_nonblocking(rep_r, self.proc.stdout, self.proc.stderr)

    def streams(self):
        return {self.proc.stdout: 'stdout', self.proc.stderr: 'stderr'}

    def send(self, obj):
        """Raises OSError (BrokenPipeError) when the kernel is gone."""
        data = json_line(obj)
        view = memoryview(data)
        while view:
            view = view[os.write(self.req_w, view):]

    def read_replies(self):
        """Complete reply objects read so far; None once the kernel closed its end.
        User code runs in the kernel and can write here too: a line longer than
        MAX_KERNEL_REPLY is dropped as it comes, never held."""
        try:
            data = os.read(self.rep_r, READ_CHUNK)
        except BlockingIOError:
            return []
        if not data:
            return None
        self.rep_buf += data
        replies = []
        while True:
            nl = self.rep_buf.find(b'\n')
            if nl < 0:
                if len(self.rep_buf) > MAX_KERNEL_REPLY:
                    self.rep_buf.clear()
                    self.rep_skip = True
                return replies
            line = bytes(self.rep_buf[:nl])
            del self.rep_buf[:nl + 1]
            if self.rep_skip:  # the end of an over-long line
                self.rep_skip = False
                continue
            try:
                reply = wire.loads(line)
            except ValueError:
                continue  # not from kernel.py (user code wrote to the pipe)
            if isinstance(reply, dict):
                replies.append(reply)

    def discard_replies(self):
        """Drops whatever waits in the reply pipe (written between executions)."""
        drain_fd(self.rep_r)
        self.rep_buf.clear()
        self.rep_skip = False

    def kill(self):
        """SIGKILLs the kernel's whole group and reaps it. Returns its exit status."""
        return end_group(self.proc)

    def close(self):
        for fd in (self.req_w, self.rep_r):
            try:
                os.close(fd)
            except OSError:
                pass
        self.proc.close()
        self.proc = None
        self.ready = False


# ---------------------------------------------------------------------------- bridge


class _Conn:
    __slots__ = ('sock', 'inbuf', 'out', 'call_id', 'exec_id', 'closed')

    def __init__(self, sock):
        self.sock = sock
        self.inbuf = bytearray()
        self.out = None
        self.call_id = None
        self.exec_id = None
        self.closed = False


class Bridge:
    """Unix socket through which code in the sandbox calls the gateway.

    A client sends one line {"execId", "method", "params"} and receives one line
    {"ok": true, "result"} or {"ok": false, "error"}; then the connection closes. Each
    request becomes a `call` event; the gateway's `call_result` is written back. Only
    the execution that is running may call; its pending calls fail when it ends.
    One thread multiplexes all connections, so slow clients cost no threads."""

    MAX_REQUEST = 1 << 20    # a call's line, parameters included
    MAX_CONNECTIONS = 256
    MAX_PENDING = 8          # calls of one execution waiting for the gateway at once

    def __init__(self, path, emitter):
        self.path = path
        self.emitter = emitter
        self.lock = threading.Lock()
        self.active_exec = None
        self.pending = {}       # call id -> _Conn
        self.replies = deque()  # (_Conn, bytes) queued by other threads
        self.conns = set()
        self.seq = 0
        self.sel = selectors.DefaultSelector()
        self.wake_r, self.wake_w = os.pipe()
        set_nonblocking(self.wake_r, self.wake_w)
        self.server = None

    def bind(self):
        os.makedirs(os.path.dirname(self.path), mode=STATE_DIR_MODE, exist_ok=True)
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass
        server = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
        # Born 0666 when code runs as another uid (it must connect; the folder is ours), else
        # 0600. umask is process-wide: this runs before any other thread exists.
        old = os.umask(0o111 if SEPARATED else 0o177)
        try:
            server.bind(self.path)
        finally:
            os.umask(old)
        server.listen(64)
        server.setblocking(False)
        self.server = server

    def serve_forever(self):
        self.sel.register(self.server, selectors.EVENT_READ, None)
        self.sel.register(self.wake_r, selectors.EVENT_READ, 'wake')
        while True:
            for key, mask in self.sel.select():
                try:
                    if key.data is None:
                        self._accept()
                    elif key.data == 'wake':
                        self._send_replies()
                    else:
                        self._service(key.data, mask)
                except Exception as exc:  # one bad connection must not stop the bridge
                    diag('bridge: %r' % (exc,))
                    if isinstance(key.data, _Conn):
                        self._close(key.data)

    # --- called by other threads

    def open_exec(self, exec_id):
        with self.lock:
            self.active_exec = exec_id

    def close_exec(self, exec_id):
        with self.lock:
            self.active_exec = None
            ended = [cid for cid, conn in self.pending.items() if conn.exec_id == exec_id]
            conns = [self.pending.pop(cid) for cid in ended]
        for conn in conns:
            self._queue_reply(conn, {'ok': False, 'error': 'the execution that made this call has ended'})

    def deliver(self, msg):
        """A call_result from the gateway."""
        call_id = msg.get('id')
        with self.lock:
            conn = self.pending.pop(call_id, None) if isinstance(call_id, str) else None
        if conn is None:
            self.emitter.log('warn', 'call_result for an unknown or finished call: %r' % (call_id,))
            return
        if msg.get('ok') is True:
            reply = {'ok': True, 'result': msg.get('result')}
        else:
            reply = {'ok': False, 'error': str(msg.get('error') or 'the call failed')}
        self._queue_reply(conn, reply)

    def _queue_reply(self, conn, obj):
        self.replies.append((conn, json_line(obj)))
        try:
            os.write(self.wake_w, b'x')
        except BlockingIOError:
            pass  # already awake

    # --- bridge thread only

    def _accept(self):
        try:
            fd, _ = self.server._accept()
        except (BlockingIOError, InterruptedError):
            return
        sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM, 0, fd)
        if len(self.conns) >= self.MAX_CONNECTIONS:
            sock.close()
            return
        sock.setblocking(False)
        conn = _Conn(sock)
        self.conns.add(conn)
        self.sel.register(sock, selectors.EVENT_READ, conn)

    def _service(self, conn, mask):
        if mask & selectors.EVENT_WRITE:
            self._write(conn)
            return
        try:
            data = conn.sock.recv(READ_CHUNK)
        except BlockingIOError:
            return
        except OSError:
            data = b''
        if not data:
            if conn.inbuf is None and conn.out is None:
                # Half-closed after a complete request (shutdown(SHUT_WR)): the reply may
                # still be read, so stop reading but keep the socket.
                self.sel.unregister(conn.sock)
            else:
                self._close(conn)
            return
        if conn.inbuf is None:
            return  # one request per connection; anything after it is ignored
        conn.inbuf += data
        nl = conn.inbuf.find(b'\n')
        if nl >= 0:
            line = bytes(conn.inbuf[:nl])
            conn.inbuf = None
            self._request(conn, line)
        elif len(conn.inbuf) > self.MAX_REQUEST:
            conn.inbuf = None
            self._start_write(conn, json_line({'ok': False, 'error': 'request too large'}))

    def _request(self, conn, line):
        try:
            req = wire.loads(line)
            if not isinstance(req, dict) or not isinstance(req.get('method'), str) or not req['method']:
                raise ValueError('expected {"execId", "method", "params"}')
        except ValueError as exc:
            self._start_write(conn, json_line({'ok': False, 'error': 'malformed bridge request: %s' % exc}))
            return
        exec_id = req.get('execId')
        with self.lock:
            busy = sum(1 for c in self.pending.values() if c.exec_id == exec_id) >= self.MAX_PENDING
            if exec_id is None or exec_id != self.active_exec or busy:
                refused = True
            else:
                refused = False
                self.seq += 1
                conn.call_id = 'call-%d' % self.seq
                conn.exec_id = exec_id
                self.pending[conn.call_id] = conn
                # Emitted under the lock so close_exec cannot slip in between.
                self.emitter.emit({'type': 'call', 'id': conn.call_id, 'execId': exec_id,
                                   'method': req['method'], 'params': req.get('params')})
        if refused:
            error = ('%d calls are already waiting: wait for one to finish' % self.MAX_PENDING if busy else
                     'no running execution %r: calls are accepted only while it runs' % (exec_id,))
            self._start_write(conn, json_line({'ok': False, 'error': error}))

    def _send_replies(self):
        try:
            while os.read(self.wake_r, 4096):
                pass
        except BlockingIOError:
            pass
        while self.replies:
            conn, data = self.replies.popleft()
            if not conn.closed:
                self._start_write(conn, data)

    def _start_write(self, conn, data):
        conn.out = memoryview(data)
        try:
            self.sel.modify(conn.sock, selectors.EVENT_WRITE, conn)
        except KeyError:  # no longer registered (the client half-closed)
            self.sel.register(conn.sock, selectors.EVENT_WRITE, conn)
        self._write(conn)

    def _write(self, conn):
        try:
            sent = conn.sock.send(conn.out)
        except BlockingIOError:
            return
        except OSError:
            self._close(conn)
            return
        conn.out = conn.out[sent:]
        if not conn.out:
            self._close(conn)

    def _close(self, conn):
        if conn.closed:
            return
        conn.closed = True
        self.conns.discard(conn)
        try:
            self.sel.unregister(conn.sock)
        except (KeyError, ValueError):
            pass
        conn.sock.close()


# ---------------------------------------------------------------------------- worker


class Job:
    __slots__ = ('kind', 'id', 'req', 'cancelled', 'finished')

    def __init__(self, kind, req):
        self.kind = kind  # 'exec' | 'preload'
        self.id = req['id']
        self.req = req
        self.cancelled = False
        self.finished = False


def parse_exec(req):
    """Validates an exec request in place (filling defaults); returns an error or None."""
    if req.get('language') not in LANGUAGES:
        return 'unknown language %r (expected one of %s)' % (req.get('language'), ', '.join(LANGUAGES))
    if not isinstance(req.get('code'), str):
        return '"code" must be a string'
    timeout = req.setdefault('timeoutMs', DEFAULT_TIMEOUT_MS)
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout <= 0:
        return '"timeoutMs" must be a positive number'
    limit = req.setdefault('outputLimit', DEFAULT_OUTPUT_LIMIT)
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 0:
        return '"outputLimit" must be a non-negative integer'
    env = req.setdefault('env', {})
    if not isinstance(env, dict) or not all(
            isinstance(k, str) and isinstance(v, str) and k and '=' not in k and '\0' not in k + v
            for k, v in env.items()):
        return '"env" must map variable names to strings'
    flags = req.setdefault('denoFlags', [])
    if not isinstance(flags, list) or not all(isinstance(f, str) and f.startswith('-') for f in flags):
        return '"denoFlags" must be a list of flags'
    fs = req.get('fs')
    if fs is not None:
        if not isinstance(fs, dict):
            return '"fs" must be {"readOnly": [...], "hidden": [...]}'
        for key in ('readOnly', 'hidden'):
            paths = fs.get(key, [])
            if not isinstance(paths, list) or not all(
                    isinstance(p, str) and p.startswith('/') and '\0' not in p for p in paths):
                return '"fs.%s" must be a list of absolute paths' % key
            if key == 'hidden' and any(os.path.normpath(p) == '/' for p in paths):
                return '"/" cannot be hidden'
        # Nothing to narrow: run as usual (and pay nothing for it).
        req['fs'] = fs if fs.get('readOnly') or fs.get('hidden') else None
    return None


class Worker:
    """Runs jobs one at a time; cancel() may be called from any thread."""

    def __init__(self, emitter, bridge):
        self.emitter = emitter
        self.bridge = bridge
        self.cond = threading.Condition()
        self.jobs = deque()
        self.current = None
        self.stopping = False
        self.kernel = Kernel()
        self.running_pgid = None  # the exec process group, for shutdown
        self.spares = []          # a lockdown helper started ahead for the next narrowed execution
        self.trim_at = None       # when to hand freed heap back, if still idle then
        self.seq = 0
        # The workspace scan that ended the previous execution: the next one may start
        # from it when the gateway says nothing outside the sandbox wrote in between.
        self.last_scan = None
        self.wake_r, self.wake_w = os.pipe()
        set_nonblocking(self.wake_r, self.wake_w)
        self.woken = False        # something was written to wake_w (saves a read per execution)
        self.last_ready = ()      # streams _pump saw readable in its last poll
        self.sweeper = Sweeper()

    # --- any thread

    def submit(self, kind, req):
        job_id = req.get('id')
        if not isinstance(job_id, str) or not job_id:
            self.emitter.log('error', '%s request without a string "id"' % kind)
            return
        with self.cond:
            if (self.current and self.current.id == job_id) or any(j.id == job_id for j in self.jobs):
                self.emitter.log('error', 'duplicate request id %r ignored' % job_id)
                return
        if kind == 'exec':
            problem = parse_exec(req)
            if problem:
                self.emitter.emit(done_event(job_id, notice='invalid exec request: ' + problem))
                return
        with self.cond:
            self.jobs.append(Job(kind, req))
            self.cond.notify()

    def cancel(self, target):
        with self.cond:
            if self.current is not None and self.current.id == target:
                self.current.cancelled = True
                self._wake()
                return
            job = next((j for j in self.jobs if j.id == target), None)
            if job is None:
                self.emitter.log('warn', 'cancel: no queued or running request %r' % (target,))
                return
            self.jobs.remove(job)
        if job.kind == 'exec':
            self.emitter.emit(done_event(job.id, notice='Cancelled before it started.'))
        else:
            self.emitter.emit({'type': 'preloaded', 'id': job.id, 'modules': job.req.get('modules') or [],
                               'ms': 0, 'error': 'cancelled before it started'})

    def shutdown(self):
        """Kills whatever runs (stdin closed: nobody is listening any more)."""
        with self.cond:
            self.stopping = True
            self.jobs.clear()
            self.cond.notify()
        if self.running_pgid:
            kill_group(self.running_pgid)
        for helper in list(self.spares):
            kill_group(helper.proc.pid)
        proc = self.kernel.proc
        if proc is not None:
            kill_group(proc.pid)

    def _wake(self):
        self.woken = True
        try:
            os.write(self.wake_w, b'x')
        except BlockingIOError:
            pass

    # --- worker thread

    def run(self):
        self._start_kernel()
        self.trim_at = time.monotonic() + TRIM_IDLE_SECONDS  # start-up garbage (compiling this file)
        while True:
            with self.cond:
                while not self.jobs and not self.stopping:
                    timeout = self._idle_duties(time.monotonic())
                    self.cond.wait(timeout)
                if self.stopping:
                    return
                job = self.current = self.jobs.popleft()
            try:
                if job.kind == 'exec':
                    self._run_exec(job)
                else:
                    self._run_preload(job)
            except Exception as exc:
                import traceback
                diag(traceback.format_exc())
                self.emitter.log('error', 'runner error in %s %s: %r' % (job.kind, job.id, exc))
                if job.kind == 'exec' and not job.finished:
                    self.emitter.emit(done_event(job.id, notice='Internal runner error: %r' % (exc,)))
            finally:
                with self.cond:
                    self.current = None
                self.trim_at = time.monotonic() + TRIM_IDLE_SECONDS

    def _idle_duties(self, now):
        """While idle: hands freed heap back once idle for a while after a job, drops a
        spare lockdown helper unused for long. Returns how long to wait (None: forever)."""
        waits = []
        if self.trim_at is not None:
            if now >= self.trim_at:
                self.trim_at = None
                malloc_trim()
            else:
                waits.append(self.trim_at - now)
        if self.spares:
            idle = now - self.spares[0].since
            if idle >= SPARE_IDLE_SECONDS:
                self.spares.pop().discard()  # give its memory back
            else:
                waits.append(SPARE_IDLE_SECONDS - idle)
        return min(waits) if waits else None

    def _kept_sessions(self):
        keep = {helper.proc.pid for helper in self.spares}
        if self.kernel.alive:
            keep.add(self.kernel.proc.pid)
        return keep

    def _start_kernel(self):
        """Starts the kernel if none runs; a failure is reported by the next Python exec."""
        if self.kernel.alive or self.stopping:
            return None
        try:
            self.kernel.start()
            return None
        except OSError as exc:
            diag('cannot start the Python kernel: %s' % exc)
            return 'The Python kernel could not be started: %s%s' % (exc, hint_for(exc))

    def _pump(self, job, output, streams, deadline, proc=None, kernel=None, accept=None):
        """Forwards output until the process ends (proc exited / kernel replied), the
        deadline passes or the job is cancelled. Returns (reason, kernel reply) with reason
        'exited', 'died' (kernel gone), 'timeout' or 'cancel'. With a kernel, only a reply
        that `accept` takes ends the wait; others are dropped."""
        # poll(2): one syscall per wait, nothing to set up or tear down (epoll costs
        # three more syscalls per execution, and syscalls are slow under gVisor).
        sel = selectors.PollSelector()
        try:
            for fd, name in streams.items():
                sel.register(fd, selectors.EVENT_READ, name)
            sel.register(self.wake_r, selectors.EVENT_READ, 'wake')
            if kernel is not None:
                sel.register(kernel.rep_r, selectors.EVENT_READ, 'reply')
            open_streams = len(streams)
            poll = 0.0005  # for proc: how often to look for its exit once its pipes closed
            while True:
                now = time.monotonic()
                output.flush_due(now)
                if job.cancelled:
                    return 'cancel', None
                if proc is not None and has_exited(proc):
                    return 'exited', None
                if now >= deadline:
                    return 'timeout', None
                timeout = deadline - now
                hint = output.wait_hint(now)
                if hint is not None:
                    timeout = min(timeout, hint)
                if proc is not None:
                    # Its exit has no fd to wait on: look again soon, sooner once the
                    # pipes closed (it is then almost certainly exiting).
                    if open_streams == 0:
                        timeout, poll = min(timeout, poll), min(poll * 2, 0.05)
                    else:
                        timeout = min(timeout, 0.05)
                events = sel.select(timeout)
                if kernel is not None:
                    # Streams before the reply: what the kernel wrote before replying is
                    # in the pipes by the time the reply is, so a stream that this poll
                    # does not report readable has nothing more of this execution.
                    events.sort(key=lambda event: event[0].data == 'reply')
                    self.last_ready = [key.fd for key, _ in events if key.data in ('stdout', 'stderr')]
                for key, _ in events:
                    if key.data == 'wake':
                        drain_fd(self.wake_r)
                    elif key.data == 'reply':
                        replies = kernel.read_replies()
                        if replies is None:
                            return 'died', None
                        for reply in replies:
                            if accept is None or accept(reply):
                                return 'exited', reply
                    elif not read_into(key.fd, key.data, output):
                        sel.unregister(key.fd)
                        open_streams -= 1
        finally:
            sel.close()

    def _drain(self, output, streams, grace, limit=DRAIN_MAX):
        """Reads what the streams still hold: until EOF, until nothing came for `grace`
        seconds, or for `limit` seconds at most (a live writer cannot keep us here)."""
        sel = selectors.PollSelector()
        try:
            for fd, name in streams.items():
                sel.register(fd, selectors.EVENT_READ, name)
            stop = time.monotonic() + limit
            while sel.get_map() and time.monotonic() < stop:
                events = sel.select(grace)
                if not events:
                    break
                for key, _ in events:
                    if not read_into(key.fd, key.data, output):
                        sel.unregister(key.fd)
        finally:
            sel.close()

    # --- executions

    def _run_exec(self, job):
        req = job.req
        if self.woken:  # a cancel of an earlier job may have left a byte
            self.woken = False
            drain_fd(self.wake_r)
        output = Output(self.emitter, job.id, req['outputLimit'])
        if req.get('reuseSnapshot') and self.last_scan is not None:
            before = self.last_scan
        else:
            before = snapshot(WORKSPACE)
        self.bridge.open_exec(job.id)
        try:
            if req['language'] == 'python':
                outcome = self._exec_python(job, output)
            else:
                outcome = self._exec_process(job, output)
        finally:
            self.bridge.close_exec(job.id)
        # Whatever the execution left running in the background ends with it.
        if SEPARATED:
            self.sweeper.sweep(self._kept_sessions())
        output.finish()
        after = snapshot(WORKSPACE)
        self.last_scan = after
        notices = [outcome.pop('notice', None), scan_notice(before, after)]
        changes = file_changes(before.files, after.files, before.partial or after.partial)
        if len(changes) > MAX_FILE_CHANGES:
            notices.append('%d more file changes are not listed.' % (len(changes) - MAX_FILE_CHANGES))
            changes = changes[:MAX_FILE_CHANGES]
        event = done_event(job.id, truncated=output.truncated(), files=changes,
                           notice=' '.join(n for n in notices if n) or None, **outcome)
        job.finished = True
        self.emitter.emit(event)
        if req['language'] == 'python' and not self.kernel.alive:
            self._start_kernel()  # a fresh kernel boots while the gateway reads the result

    def _exec_env(self, job):
        env = dict(job.req['env'])
        env['SANDGATE_BRIDGE'] = BRIDGE_PATH
        env['SANDGATE_EXEC_ID'] = job.id
        return env

    def _exec_process(self, job, output):
        """bash, TypeScript, JavaScript: one process (group) per execution."""
        req = job.req
        self.seq += 1
        ext = {'bash': 'sh', 'typescript': 'ts', 'javascript': 'js'}[req['language']]
        script = os.path.join(STATE_DIR, 'exec-%d.%s' % (self.seq, ext))
        if req['language'] == 'bash':
            argv = [BASH, script]
        else:
            argv = [DENO, 'run', '--no-prompt', '--quiet'] + req['denoFlags'] + [script]
        try:
            with open(script, 'w', encoding='utf-8', errors='surrogatepass') as f:
                f.write(req['code'])
            return self._run_process(job, output, argv)
        except NarrowingError as exc:
            return {'notice': NARROWING_FAILED % exc}
        except OSError as exc:
            return {'notice': 'Could not start %s: %s%s' % (os.path.basename(argv[0]), exc, hint_for(exc))}
        finally:
            try:
                os.unlink(script)
            except OSError:
                pass

    def _run_process(self, job, output, argv):
        started = time.monotonic()
        if self.stopping:
            return {'notice': 'The runner is shutting down.'}
        proc = spawn(argv, self._exec_env(job), fs=job.req.get('fs'), spares=self.spares)
        self.running_pgid = proc.pid
        if job.req.get('fs') and not self.spares:
            # Narrowed executions tend to come in runs: a helper for the next one starts
            # now (the one just used is this execution's process), so it can skip that.
            try:
                self.spares.append(Helper())
            except OSError as exc:
                diag('cannot start a lockdown helper: %s' % exc)
        try:
            streams = {proc.stdout: 'stdout', proc.stderr: 'stderr'}
            set_nonblocking(*streams)
            deadline = started + job.req['timeoutMs'] / 1000
            reason, _ = self._pump(job, output, streams, deadline, proc=proc)
            # Always kill the group: background children do not outlive their execution.
            kill_group(proc.pid)
            status = proc.wait()
            duration = time.monotonic() - started
            end_group(proc)  # again, until no member is left (fork bombs)
            self._drain(output, streams, DRAIN_GRACE)
        finally:
            self.running_pgid = None
            proc.close()
        outcome = {'durationMs': ms(duration)}
        if reason in ('timeout', 'cancel'):
            outcome.update(exitCode=None, killed=True, timedOut=reason == 'timeout',
                           notice=stop_notice(reason, job.req['timeoutMs']))
        elif status < 0:
            outcome.update(exitCode=None, killed=True, notice='The process was killed by %s%s.' % (
                signal_name(-status), ' (out of memory?)' if -status == _signal.SIGKILL else ''))
        else:
            outcome['exitCode'] = status
        return outcome

    def _kernel_ready(self, job, kernel=None):
        """Waits for a kernel (by default the persistent one) to finish booting. Returns
        None when it is ready, else an outcome for the job (cancelled, or the kernel could
        not start)."""
        persistent = kernel is None
        kernel = kernel or self.kernel
        if persistent and not kernel.alive:
            problem = self._start_kernel()
            if problem:
                return {'notice': problem}
        if kernel.ready:
            return None
        deadline = time.monotonic() + KERNEL_BOOT_SECONDS
        reason, _ = self._pump(job, DiagSink(), kernel.streams(), deadline, kernel=kernel,
                               accept=lambda reply: reply.get('ready') is True)
        if reason == 'exited':
            kernel.ready = True
            return None
        if reason == 'cancel':
            return {'notice': 'Cancelled while the Python kernel was starting.'}
        status = self._lose_kernel(DiagSink(), kernel)
        why = 'it did not become ready in %d s' % KERNEL_BOOT_SECONDS if reason == 'timeout' else describe_status(status)
        if kernel.preloaded:
            # A preloaded module may be what kills it: the next start goes without them.
            why += '; preloaded modules (%s) will not be imported again' % ', '.join(kernel.preloaded)
            kernel.preloaded = []
        return {'restarted': persistent, 'notice': 'The Python kernel failed to start (%s).' % why}

    def _lose_kernel(self, output, kernel=None):
        """Kills a kernel (and whatever it started), keeps its last output, forgets it."""
        kernel = kernel or self.kernel
        status = kernel.kill()
        self._drain(output, kernel.streams(), DRAIN_GRACE)
        kernel.close()
        return status

    def _exec_python(self, job, output):
        if job.req.get('fs'):
            return self._exec_python_narrowed(job, output)
        outcome = self._kernel_ready(job)
        if outcome is not None:
            return outcome
        return self._kernel_exec(job, output, self.kernel,
                                 ' The Python kernel was restarted: variables and imports from earlier executions are gone.')

    def _exec_python_narrowed(self, job, output):
        """Narrowed Python runs in a one-shot kernel started through the lockdown: the
        persistent kernel's namespaces cannot be narrowed after the fact."""
        kernel = Kernel(job.req['fs'])
        try:
            kernel.start()
        except NarrowingError as exc:
            return {'notice': NARROWING_FAILED % exc}
        except OSError as exc:
            return {'notice': 'The Python interpreter for this narrowed execution could not be started: %s%s'
                    % (exc, hint_for(exc))}
        try:
            outcome = self._kernel_ready(job, kernel)
            if outcome is None:
                outcome = self._kernel_exec(job, output, kernel, '')
            outcome['restarted'] = False  # the persistent kernel was not touched
            outcome['notice'] = ' '.join(n for n in (SEPARATE_KERNEL, outcome.get('notice')) if n)
            return outcome
        finally:
            if kernel.alive:
                self._lose_kernel(Discard(), kernel)

    def _kernel_exec(self, job, output, kernel, lost):
        """Runs the job's code in a ready kernel. On a timeout, cancel or death the kernel
        is killed and `lost` ends the notice."""
        discard_pending(kernel.streams())  # output from between executions
        kernel.discard_replies()  # and anything written to the reply pipe meanwhile
        started = time.monotonic()
        request = {'op': 'exec', 'id': job.id, 'code': job.req['code'], 'env': self._exec_env(job),
                   'cwd': WORKSPACE, 'figdir': FIGURE_DIR}
        try:
            kernel.send(request)
        except OSError:
            reason, reply = 'died', None
        else:
            deadline = started + job.req['timeoutMs'] / 1000
            reason, reply = self._pump(job, output, kernel.streams(), deadline, kernel=kernel,
                                       accept=lambda reply: reply.get('id') == job.id)
        if reason == 'exited':
            # Everything the kernel wrote before replying is already in the pipes; _pump
            # read once from the streams that had some: read on from those only.
            streams = kernel.streams()
            read_available({fd: streams[fd] for fd in self.last_ready if fd in streams}, output)
            outcome = exec_outcome_of(reply)
            outcome['durationMs'] = ms(time.monotonic() - started)
            return outcome
        status = self._lose_kernel(output, kernel)
        outcome = {'durationMs': ms(time.monotonic() - started), 'exitCode': None, 'killed': True,
                   'restarted': True, 'result': None}
        if reason == 'died':
            if status >= 0:
                outcome['exitCode'] = status
            outcome['notice'] = 'The Python kernel died (%s).%s' % (describe_status(status), lost)
        else:
            outcome.update(timedOut=reason == 'timeout', notice=stop_notice(reason, job.req['timeoutMs']) + lost)
        return outcome

    def _run_preload(self, job):
        modules = [m for m in job.req.get('modules') or [] if isinstance(m, str)]
        started = time.monotonic()
        event = {'type': 'preloaded', 'id': job.id, 'modules': modules}
        error = None
        outcome = self._kernel_ready(job)
        if outcome is not None:
            error = outcome['notice']
        else:
            kernel = self.kernel
            try:
                kernel.discard_replies()
                kernel.send({'op': 'preload', 'modules': modules})
                reason, reply = self._pump(job, DiagSink(), kernel.streams(), started + PRELOAD_SECONDS, kernel=kernel,
                                           accept=lambda reply: 'loaded' in reply)
            except OSError:
                reason, reply = 'died', None
            if reason == 'exited':
                error = bounded(reply.get('error'), 2000)
                loaded = reply.get('loaded')
                for name in loaded if isinstance(loaded, list) else []:
                    if name in modules and name not in kernel.preloaded:
                        kernel.preloaded.append(name)
            else:
                status = self._lose_kernel(DiagSink())
                error = {'cancel': 'cancelled', 'timeout': 'timed out after %d s' % PRELOAD_SECONDS}.get(
                    reason, 'the Python kernel died (%s)' % describe_status(status))
                error += '; the kernel was restarted'
                self._start_kernel()
        event['ms'] = ms(time.monotonic() - started)
        if error:
            event['error'] = error
        self.emitter.emit(event)


def bounded(value, limit, keep_tail=False):
    """value when it is a string of at most `limit` characters, cut to that when longer
    (keeping its end with keep_tail), None when it is not a string."""
    if not isinstance(value, str):
        return None
    if len(value) <= limit:
        return value
    return '...' + value[-limit:] if keep_tail else value[:limit] + '...'


def exec_outcome_of(reply):
    """The outcome fields of a kernel's exec reply, of the types and sizes the protocol
    allows (user code can write a reply of its own)."""
    code = reply.get('exitCode')
    if isinstance(code, bool) or not isinstance(code, int) or not -(1 << 31) <= code < 1 << 31:
        code = 1
    outcome = {'exitCode': code, 'result': bounded(reply.get('result'), MAX_RESULT_CHARS)}
    error = reply.get('error')
    if isinstance(error, dict):
        outcome['error'] = {'name': bounded(error.get('name'), 200) or 'Error',
                            'message': bounded(error.get('message'), 4096) or '',
                            'traceback': bounded(error.get('traceback'), 16384, keep_tail=True) or ''}
    figure_error = bounded(reply.get('figureError'), 500)
    if figure_error:
        outcome['notice'] = 'Open matplotlib figures could not be saved (%s).' % figure_error
    return outcome


def drain_fd(fd):
    try:
        while os.read(fd, 4096):
            pass
    except BlockingIOError:
        pass


def read_available(streams, output, max_reads=64):
    """Reads what the (non-blocking) streams hold right now, without waiting; a writer
    that never stops cannot keep us here longer than max_reads chunks per stream."""
    for fd, name in streams.items():
        for _ in range(max_reads):
            try:
                data = os.read(fd, READ_CHUNK)
            except (BlockingIOError, OSError):
                break
            if not data:
                break
            output.feed(name, data)


def discard_pending(streams):
    """Reads and drops what the streams hold now: one poll, and reads only if needed."""
    poller = select.poll()
    for fd in streams:
        poller.register(fd, select.POLLIN)
    ready = {fd: streams[fd] for fd, _ in poller.poll(0) if fd in streams}
    if ready:
        read_available(ready, Discard())


def read_into(fd, name, output):
    """Reads one chunk into output; False at EOF."""
    try:
        data = os.read(fd, READ_CHUNK)
    except BlockingIOError:
        return True
    except OSError:
        return False
    if not data:
        return False
    output.feed(name, data)
    return True


def hint_for(exc):
    if isinstance(exc, BlockingIOError):  # EAGAIN from fork: the nproc limit
        return (' (the sandbox is at its process limit; processes started from Python keep'
                ' running between executions until they exit or the kernel restarts)')
    return ''


def ms(seconds):
    return round(seconds * 1000, 3)


def describe_status(status):
    if status is None:
        return 'unknown status'
    if status < 0:
        return 'killed by %s%s' % (signal_name(-status), ', perhaps out of memory' if -status == _signal.SIGKILL else '')
    return 'exit code %d' % status


def stop_notice(reason, timeout_ms):
    if reason == 'timeout':
        return 'Execution timed out after %s s and was killed.' % ('%g' % (timeout_ms / 1000))
    return 'Execution cancelled and killed.'


def done_event(exec_id, exitCode=None, durationMs=0, timedOut=False, killed=False, restarted=False,
               truncated=None, files=None, notice=None, result=None, error=None):
    event = {'type': 'done', 'id': exec_id, 'exitCode': exitCode, 'durationMs': durationMs,
             'timedOut': timedOut, 'killed': killed, 'restarted': restarted,
             'truncated': truncated or {'stdout': 0, 'stderr': 0}, 'files': files or []}
    if result is not None:
        event['result'] = result
    if notice:
        event['notice'] = notice
    if error:
        event['error'] = error
    return event


# ---------------------------------------------------------------------------- startup


_malloc_trim = None


def malloc_trim():
    """Returns the free parts of the C heap to the system (glibc keeps them otherwise;
    compiling this file alone leaves ~2 MB). A few milliseconds, done only when idle."""
    global _malloc_trim
    if _malloc_trim is None:
        try:
            import ctypes
            _malloc_trim = ctypes.CDLL(None).malloc_trim
        except (ImportError, OSError, AttributeError):
            _malloc_trim = False
    if _malloc_trim:
        _malloc_trim(0)


def prepare():
    # Processes start in the runner's cwd (posix_spawn has no cwd of its own).
    try:
        os.chdir(WORKSPACE)
    except OSError as exc:
        diag('cannot enter the workspace %s: %s' % (WORKSPACE, exc))
    # Only the fds a child is given may reach it: none inherited from whoever started us.
    for name in os.listdir('/proc/self/fd'):
        if int(name) > 2:
            try:
                os.set_inheritable(int(name), False)
            except OSError:
                pass
    os.makedirs(STATE_DIR, mode=STATE_DIR_MODE, exist_ok=True)
    # Fails (and the runner with it) if someone else made the folder first.
    os.chmod(STATE_DIR, STATE_DIR_MODE)


def probe_deno(versions):
    """Deno's version, found after `ready` (running deno costs ~100 ms under gVisor)."""
    time.sleep(0.3)  # let the kernel boot first
    try:
        proc = Proc([DENO, '--version'])
        try:
            out, _ = read_line(proc.stdout, 60)
        finally:
            end_group(proc)
            proc.close()
        versions['deno'] = out.split()[1].decode()
    except (OSError, IndexError) as exc:
        diag('deno version unknown: %r' % (exc,))


def dispatch(line, worker, bridge, emitter, versions):
    try:
        req = wire.loads(line)
    except ValueError as exc:
        emitter.log('error', 'malformed request line (%s): %.200r' % (exc, line))
        return
    if not isinstance(req, dict):
        emitter.log('error', 'a request must be a JSON object: %.200r' % (line,))
        return
    op = req.get('op')
    if op == 'ping':
        emitter.emit({'type': 'pong', 'id': req.get('id'), 'versions': dict(versions), 'separated': SEPARATED})
    elif op in ('exec', 'preload'):
        worker.submit(op, req)
    elif op == 'cancel':
        worker.cancel(req.get('target'))
    elif op == 'call_result':
        bridge.deliver(req)
    else:
        emitter.log('error', 'unknown op %r' % (op,))


def main():
    # Keep the protocol on a private copy of fd 1 and point fd 1 at stderr, so a stray
    # write to stdout (ours or a library's) can never corrupt the protocol stream.
    proto = os.fdopen(os.dup(1), 'wb')
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    emitter = Emitter(proto)

    prepare()
    bridge = Bridge(BRIDGE_PATH, emitter)
    try:
        bridge.bind()
    except OSError as exc:
        diag('bridge disabled: cannot listen on %s: %s' % (BRIDGE_PATH, exc))
        bridge.server = None
    versions = {'python': sys.version.split()[0]}
    emitter.emit({'type': 'ready', 'pid': os.getpid(), 'versions': versions, 'separated': SEPARATED})

    worker = Worker(emitter, bridge)
    if bridge.server is not None:
        threading.Thread(target=bridge.serve_forever, name='bridge', daemon=True).start()
    threading.Thread(target=worker.run, name='worker', daemon=True).start()
    threading.Thread(target=probe_deno, args=(versions,), name='probe', daemon=True).start()

    def stop(*_):
        worker.shutdown()
        try:
            os.unlink(BRIDGE_PATH)
        except OSError:
            pass
        os._exit(0)

    _signal.signal(_signal.SIGTERM, stop)
    stdin = sys.stdin.buffer
    while True:
        line = stdin.readline()
        if not line:
            break
        if not line.strip():
            continue
        try:
            dispatch(line, worker, bridge, emitter, versions)
        except Exception as exc:  # never let one request take the runner down
            diag('dispatch: %r' % (exc,))
            emitter.log('error', 'could not handle a request: %r' % (exc,))
    stop()


if __name__ == '__main__':
    main()
