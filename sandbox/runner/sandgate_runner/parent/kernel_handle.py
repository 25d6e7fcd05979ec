"""The runner's handle on a Python kernel child (kernel/main.py runs inside it): started
from the bytecode cache, fed one request line at a time, its reply lines bounded and
checked (user code shares its process and can write lines of its own)."""
import os
import sys

from .. import wire
from ..wire import json_line
from .narrowing import spawn
from .procs import end_group, kernel_memory_limit, set_nonblocking
from .settings import KERNEL_BOOT, MAX_KERNEL_REPLY, READ_CHUNK


class Kernel:
    """The Python kernel child and the pipes to it. Used by the worker thread only."""

    label = 'Python kernel'
    watch_exit = False  # its death shows as EOF on the reply pipe

    def on_ready(self):
        """Called once it said it is ready."""

    def __init__(self, fs=None):
        self.proc = None
        self.ready = False
        self.ran = False     # an execution ran in this process: its death loses user state
        self.preloaded = []  # modules imported again after a restart
        self.fs = fs         # narrowed (a one-shot kernel for one execution)

    @property
    def alive(self):
        return self.proc is not None

    def start(self):
        req_r, req_w = os.pipe()
        rep_r, rep_w = os.pipe()
        try:
            self.proc = spawn(self.argv(req_r, rep_w), None, fs=self.fs, pass_fds=(req_r, rep_w))
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
        self.first_alone = True
        self.ready = False
        set_nonblocking(rep_r, self.proc.stdout, self.proc.stderr)

    def argv(self, req_r, rep_w):
        return [sys.executable, '-u', '-c', KERNEL_BOOT, str(req_r), str(rep_w), wire.dumps(self.preloaded),
                str(kernel_memory_limit())]

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
        MAX_KERNEL_REPLY is dropped as it comes, never held. `first_alone` says whether
        the first reply returned was the oldest thing in the pipe (nothing of user code's
        came before it), that is, whether the pipe was readable because of it."""
        try:
            data = self.read_chunk()
        except BlockingIOError:
            return []
        if not data:
            return None
        alone = not self.rep_buf and not self.rep_skip
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
                alone = False
                continue
            try:
                reply = wire.loads(line)
            except ValueError:
                alone = False
                continue  # not from the kernel (user code wrote to the pipe)
            if isinstance(reply, dict):
                if not replies:
                    self.first_alone = alone
                replies.append(reply)
            else:
                alone = False

    def read_chunk(self):
        """What the reply pipe holds (b'' at its end); BlockingIOError when nothing."""
        return os.read(self.rep_r, READ_CHUNK)

    def discard_replies(self):
        """Drops whatever waits in the reply pipe (written between executions)."""
        try:
            for _ in range(64):  # a writer that never stops cannot hold the worker
                if not self.read_chunk():
                    break
        except BlockingIOError:
            pass
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
