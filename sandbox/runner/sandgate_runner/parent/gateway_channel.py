"""The runner's end of its channel to the gateway (the container's attached stdio, or
on a cluster a socket the gateway reaches through `exec`: see PROTOCOL.md): events
leave as protocol lines through the Emitter, from any thread; each request line that
arrives is parsed and handed to the part that answers it (dispatch)."""
import os
import stat
import threading

from .. import wire
from .settings import SEPARATED


class Emitter:
    """Writes events to the protocol stream; safe to call from any thread."""

    def __init__(self, stream):
        self._stream = stream
        self._lock = threading.Lock()

    def set_stream(self, stream):
        """Events go to `stream` from now on (None: nobody listens, they are dropped)."""
        with self._lock:
            self._stream = stream

    def emit(self, event):
        line = wire.json_line(event)
        with self._lock:
            if self._stream is None:
                return
            try:
                self._stream.write(line)
                self._stream.flush()
            except (OSError, ValueError):
                pass  # the gateway is gone; stdin EOF ends the runner

    def log(self, level, message):
        self.emit({'type': 'log', 'level': level, 'message': message})


def dispatch(line, worker, bridge, emitter, versions):
    """One request line: ping is answered here, at once; exec and preload are queued for
    the worker; cancel and call_result are handled at once, even while an execution runs."""
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


class SocketChannel:
    """The channel on a cluster: a Unix socket in a folder only root may enter (code runs as
    uid 1000 and cannot connect), which the gateway reaches by exec'ing relay.py in the pod.
    Output through `exec` is not kept by the kubelet, where a container's own stdout is
    written to the node's logs. One gateway at a time: a new connection replaces the one
    before (a gateway that adopts the sandbox after another); events while none is
    connected are dropped, as when the gateway is gone."""

    def __init__(self, path, emitter):
        self.path = path
        self.emitter = emitter
        self._lock = threading.Condition()
        self._current = None

    def bind(self):
        import socket  # here: only a pod's runner needs it (test_boot: the runner stays lean)
        folder = os.path.dirname(self.path)
        os.makedirs(folder, mode=0o700, exist_ok=True)
        st = os.lstat(folder)
        if not stat.S_ISDIR(st.st_mode):
            raise OSError('%s is not a folder' % folder)
        if os.getuid() == 0:
            os.chown(folder, 0, 0)
        os.chmod(folder, 0o700)
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass
        self.server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.server.bind(self.path)
        os.chmod(self.path, 0o600)
        self.server.listen(4)

    def accept_forever(self):
        import socket
        while True:
            conn, _ = self.server.accept()
            with self._lock:
                old, self._current = self._current, conn
                self.emitter.set_stream(conn.makefile('wb'))
                self._lock.notify_all()
            if old is not None:
                try:
                    old.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def lines(self):
        """Request lines from whichever gateway is connected, for ever."""
        threading.Thread(target=self.accept_forever, name='channel', daemon=True).start()
        while True:
            with self._lock:
                while self._current is None:
                    self._lock.wait()
                conn = self._current
            reader = conn.makefile('rb')
            try:
                for line in reader:
                    yield line
            except OSError:
                pass
            with self._lock:
                if self._current is conn:
                    self._current = None
                    self.emitter.set_stream(None)
            try:
                conn.close()
            except OSError:
                pass
