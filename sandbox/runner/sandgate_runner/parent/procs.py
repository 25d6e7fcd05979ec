"""The processes the runner starts for user code: each in a session of its own, as the
sandbox's uid, on os.posix_spawn; their groups ended with certainty; how they ended,
in words. (Ending what outlived its execution: sweeper.py; processes that run narrowed:
narrowing.py.)"""
import _signal
import os
import select
import threading
import time

from .settings import DROP_ARGV, GROUP_KILL_SECONDS, KERNEL_MEMORY, SIGNAL_NAMES, diag


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


def describe_status(status):
    if status is None:
        return 'unknown status'
    if status < 0:
        return 'killed by %s%s' % (signal_name(-status), ', perhaps out of memory' if -status == _signal.SIGKILL else '')
    return 'exit code %d' % status
