"""The runner's end of its channel to the gateway (the container's attached stdio, see
PROTOCOL.md): events leave as protocol lines through the Emitter, from any thread;
each request line that arrives on stdin is parsed and handed to the part that answers
it (dispatch)."""
import threading

from .. import wire
from .settings import SEPARATED


class Emitter:
    """Writes events to the protocol stream; safe to call from any thread."""

    def __init__(self, stream):
        self._stream = stream
        self._lock = threading.Lock()

    def emit(self, event):
        line = wire.json_line(event)
        with self._lock:
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
