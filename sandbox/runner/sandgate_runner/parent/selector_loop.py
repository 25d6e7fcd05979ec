"""One thread that serves many sockets (the bridge's and the egress relay's): a
listening socket, a pipe other threads write a byte to when they queued work for it, and
the connections, each handled by the subclass. Both take connections only from the
execution that runs (the worker says which: open_exec, and the subclass's close_exec).
A failure with one connection closes that connection and never stops the loop."""
import os
import selectors
import threading

from .procs import set_nonblocking
from .settings import diag


class SelectorLoop:
    NAME = 'loop'

    def __init__(self):
        self.sel = selectors.DefaultSelector()
        self.wake_r, self.wake_w = os.pipe()
        set_nonblocking(self.wake_r, self.wake_w)
        self.server = None
        self.lock = threading.Lock()
        self.active_exec = None

    def listen(self, server):
        """Serves `server`, bound by the subclass."""
        server.listen(64)
        server.setblocking(False)
        self.server = server

    def open_exec(self, exec_id):
        """From the worker: `exec_id` runs now."""
        with self.lock:
            self.active_exec = exec_id

    def wake(self):
        """From another thread: the loop runs `_woken` soon."""
        try:
            os.write(self.wake_w, b'x')
        except BlockingIOError:
            pass  # already awake

    def drain_wake(self):
        try:
            while os.read(self.wake_r, 4096):
                pass
        except BlockingIOError:
            pass

    def serve_forever(self):
        self.sel.register(self.server, selectors.EVENT_READ, None)
        self.sel.register(self.wake_r, selectors.EVENT_READ, 'wake')
        while True:
            for key, mask in self.sel.select():
                try:
                    if key.data is None:
                        self._accept()
                    elif key.data == 'wake':
                        self.drain_wake()
                        self._woken()
                    else:
                        self._service(key.data, mask)
                except Exception as exc:  # one bad connection must not stop the loop
                    diag('%s: %r' % (self.NAME, exc))
                    if key.data is not None and key.data != 'wake':
                        self._failed(key.data)

    # --- the subclass's

    def _accept(self):
        raise NotImplementedError

    def _woken(self):
        raise NotImplementedError

    def _service(self, conn, mask):
        raise NotImplementedError

    def _failed(self, conn):
        raise NotImplementedError
