"""The worker's waiting: an execution's output forwarded while its process runs, until
the process ends (it exited, or a kernel replied), the deadline passes or the job is
cancelled; and what a process still holds read once it ended. Part of the Worker
(worker.py), whose state it uses: wake_r (a cancel wakes the wait), last_ready."""
import selectors
import time

from .output import drain_fd, read_into
from .procs import has_exited
from .settings import DRAIN_MAX


class Pump:
    """The Worker's waits on a process and its output."""

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
                if kernel is not None and kernel.watch_exit and not kernel.ready and has_exited(kernel.proc):
                    # What it wrote before it died comes first.
                    replies = kernel.read_replies() or []
                    for reply in replies:
                        if accept is None or accept(reply):
                            return 'exited', reply
                    return 'died', None
                if now >= deadline:
                    return 'timeout', None
                timeout = deadline - now
                hint = output.wait_hint(now)
                if hint is not None:
                    timeout = min(timeout, hint)
                if kernel is not None and kernel.watch_exit and not kernel.ready:
                    timeout = min(timeout, 0.01)  # its death or key before ready has no fd to wait on
                if proc is not None:
                    # Its exit has no fd to wait on: look again soon, sooner once the
                    # pipes closed (it is then almost certainly exiting).
                    if open_streams == 0:
                        timeout, poll = min(timeout, poll), min(poll * 2, 0.05)
                    else:
                        timeout = min(timeout, 0.05)
                events = sel.select(timeout)
                if kernel is not None and kernel.watch_exit and not kernel.ready and not any(
                        key.data == 'reply' for key, _ in events):
                    # Its handshake (the Deno host's key) may wait on a descriptor not polled.
                    events.append((sel.get_key(kernel.rep_r), selectors.EVENT_READ))
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
                        for i, reply in enumerate(replies):
                            if accept is None or accept(reply):
                                if i or not kernel.first_alone:
                                    # User code's bytes were ahead of the reply: the pipe may
                                    # have been readable before the reply was written, and
                                    # this poll said nothing of the output written before it.
                                    self.last_ready = None
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
