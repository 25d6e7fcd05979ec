"""The Unix socket through which code in the sandbox calls the gateway (upstream tools):
one line in, one line out per connection, taken only from the execution that is running,
bounded in size and in calls waiting."""
import _socket
from collections import deque
import os
import selectors

from .. import wire
from ..wire import json_line
from .selector_loop import SelectorLoop
from .settings import READ_CHUNK, SEPARATED, STATE_DIR_MODE


class _Conn:
    __slots__ = ('sock', 'inbuf', 'out', 'call_id', 'exec_id', 'closed')

    def __init__(self, sock):
        self.sock = sock
        self.inbuf = bytearray()
        self.out = None
        self.call_id = None
        self.exec_id = None
        self.closed = False


class Bridge(SelectorLoop):
    """Unix socket through which code in the sandbox calls the gateway.

    A client sends one line {"execId", "method", "params"} and receives one line
    {"ok": true, "result"} or {"ok": false, "error"}; then the connection closes. Each
    request becomes a `call` event; the gateway's `call_result` is written back. Only
    the execution that is running may call; its pending calls fail when it ends.
    One thread multiplexes all connections, so slow clients cost no threads."""

    MAX_REQUEST = 1 << 20    # a call's line, parameters included
    MAX_CONNECTIONS = 256
    MAX_PENDING = 8          # calls of one execution waiting for the gateway at once

    NAME = 'bridge'

    def __init__(self, path, emitter):
        super().__init__()
        self.path = path
        self.emitter = emitter
        self.pending = {}       # call id -> _Conn
        self.replies = deque()  # (_Conn, bytes) queued by other threads
        self.conns = set()
        self.seq = 0

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
        self.listen(server)

    # --- called by other threads

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
        self.wake()

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

    def _failed(self, conn):
        self._close(conn)

    def _woken(self):
        """Sends the replies other threads queued."""
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
