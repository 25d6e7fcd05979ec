"""Ends every process of the sandbox user that outlived the execution that started it
(the Sweeper), from the process table in /proc, and reaps the orphans the runner
inherits as the container's init."""
import _signal
import os
import time

from .procs import _children, _spawn_lock
from .settings import GROUP_KILL_SECONDS, SANDBOX_UID, diag


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
