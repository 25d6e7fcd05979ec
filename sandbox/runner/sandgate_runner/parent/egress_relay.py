"""The sandbox's one door out, when the gateway opens it: a TCP listener on the sandbox's
own loopback (127.0.0.1:SANDGATE_EGRESS_PORT; the container has no network interface,
only gVisor's loopback), which the proxy variables of a run name (HTTP_PROXY and the
rest). Nothing here speaks HTTP or decides anything: each connection is carried as it is
over the runner's channel to the gateway, whose proxy checks every request against the
run's `net` grant and is the only thing that reaches the network. See PROTOCOL.md,
"Egress".

In a sandbox whose ceiling grants no `net` (SANDGATE_EGRESS_OPEN unset) nothing leaves:
the relay reads the request's first line and answers it here with a refusal that names
the missing grant, as Deno does, so `pip install` says why instead of timing out.

Connections are taken only while an execution runs, and end with it. Each direction has
a window: at most WINDOW bytes sent and not yet acknowledged, so a download the sandbox
reads slowly (or an upload the gateway cannot pass on yet) stops reading instead of
filling memory. One thread multiplexes every connection, as the bridge does."""
import _socket
import binascii
from collections import deque
import selectors

from .selector_loop import SelectorLoop
from .settings import diag

WINDOW = 256 * 1024       # bytes in flight each way, per connection
CHUNK = 32 * 1024         # bytes read from a client per event
MAX_CONNECTIONS = 64      # open at once in this sandbox (the gateway has its own, per user)
NO_RUN = (b'HTTP/1.1 403 Forbidden\r\ncontent-type: text/plain\r\nconnection: close\r\n\r\n'
          b'sandgate: the network is reachable only while an execution runs\n')


def refusal(first_line):
    """The answer to a request when the sandbox may not reach anything: the reason phrase
    carries the message, since that is what pip and curl print of a refused tunnel."""
    parts = first_line.split(b' ')
    target = parts[1] if len(parts) > 2 else b''
    if target.startswith(b'http://'):
        target = target[7:].split(b'/', 1)[0]
    host = target.decode('ascii', 'replace')
    host = ''.join(c for c in host if c.isalnum() or c in '.-:[]')[:255]
    name = host.rsplit(':', 1)[0] if host.count(':') == 1 else host
    what = ' to "%s"' % host if host else ''
    message = ('Requires net access%s, run again with --allow-net%s (the permission ceiling of this sandbox'
               ' grants no network; an admin can)' % (what, '=' + name if name else ''))
    return ('HTTP/1.1 403 %s\r\ncontent-type: text/plain\r\nconnection: close\r\n\r\nsandgate: %s\n'
            % (message, message)).encode('ascii', 'replace')


class _Conn:
    __slots__ = ('id', 'sock', 'exec_id', 'out', 'unacked', 'written', 'reading', 'eof_in', 'eof_out', 'closed',
                 'refusing')

    def __init__(self, conn_id, sock, exec_id):
        self.id = conn_id
        self.sock = sock
        self.exec_id = exec_id
        self.out = deque()        # bytes from the gateway, not yet written to the client
        self.unacked = 0          # bytes sent to the gateway that it has not acknowledged
        self.written = 0          # bytes written to the client since the last ack we sent
        self.reading = True
        self.eof_in = False       # the client will send no more
        self.eof_out = False      # the gateway will send no more
        self.closed = False
        self.refusing = None      # closed door: the request line read so far


class EgressRelay(SelectorLoop):
    NAME = 'egress relay'

    def __init__(self, port, emitter, open_door=True):
        super().__init__()
        self.port = port
        self.open_door = open_door
        self.emitter = emitter
        self.conns = {}           # id -> _Conn (relay thread only)
        self.ops = deque()        # ('data'|'end'|'close'|'ack'|'exec_end', ...) from other threads
        self.seq = 0

    def bind(self):
        server = _socket.socket(_socket.AF_INET, _socket.SOCK_STREAM)
        server.setsockopt(_socket.SOL_SOCKET, _socket.SO_REUSEADDR, 1)
        server.bind(('127.0.0.1', self.port))
        self.listen(server)

    # --- other threads

    def close_exec(self, exec_id):
        with self.lock:
            self.active_exec = None
        self._queue(('exec_end', exec_id))

    def deliver(self, req):
        """A net_* request from the gateway (dispatch)."""
        op, conn_id = req.get('op'), req.get('id')
        if not isinstance(conn_id, str):
            return
        if op == 'net_data':
            data = req.get('data')
            try:
                raw = binascii.a2b_base64(data) if isinstance(data, str) else None
            except (binascii.Error, ValueError):
                raw = None
            if raw is None:
                self._queue(('close', conn_id))
            else:
                self._queue(('data', conn_id, raw))
        elif op == 'net_ack':
            n = req.get('bytes')
            if isinstance(n, int) and n > 0:
                self._queue(('ack', conn_id, n))
        elif op == 'net_end':
            self._queue(('end', conn_id))
        elif op == 'net_close':
            self._queue(('close', conn_id))

    def _queue(self, item):
        self.ops.append(item)
        self.wake()

    # --- relay thread only

    def _failed(self, conn):
        self._close(conn, tell=True)

    def _accept(self):
        try:
            fd, _ = self.server._accept()
        except (BlockingIOError, InterruptedError):
            return
        sock = _socket.socket(_socket.AF_INET, _socket.SOCK_STREAM, 0, fd)
        with self.lock:
            exec_id = self.active_exec
        if exec_id is None or len(self.conns) >= MAX_CONNECTIONS:
            try:
                sock.send(NO_RUN if exec_id is None else
                          b'HTTP/1.1 503 Service Unavailable\r\nconnection: close\r\n\r\n'
                          b'sandgate: too many connections open in this sandbox\n')
            except OSError:
                pass
            sock.close()
            return
        sock.setblocking(False)
        sock.setsockopt(_socket.IPPROTO_TCP, _socket.TCP_NODELAY, 1)
        self.seq += 1
        conn = _Conn('n%d' % self.seq, sock, exec_id)
        self.conns[conn.id] = conn
        if self.open_door:
            self.emitter.emit({'type': 'net_open', 'id': conn.id, 'execId': exec_id})
        else:
            conn.refusing = bytearray()
        self.sel.register(sock, selectors.EVENT_READ, conn)

    def _refuse(self, conn, data):
        """Closed door: answers once the request line is in (or 8 KiB came without one)."""
        conn.refusing += data
        nl = conn.refusing.find(b'\n')
        if nl < 0 and len(conn.refusing) < 8192 and data:
            return
        line = bytes(conn.refusing[:nl if nl >= 0 else 8192]).rstrip(b'\r')
        conn.refusing = None
        conn.reading = False
        conn.eof_in = True  # the rest of the request is not read
        conn.eof_out = True
        conn.out.append(refusal(line))
        self._flush(conn)

    def _interest(self, conn):
        if conn.closed:
            return
        events = 0
        if conn.reading and not conn.eof_in and conn.unacked < WINDOW:
            events |= selectors.EVENT_READ
        if conn.out:
            events |= selectors.EVENT_WRITE
        try:
            if events:
                self.sel.modify(conn.sock, events, conn)
            else:
                self.sel.unregister(conn.sock)
        except KeyError:
            if events:
                self.sel.register(conn.sock, events, conn)
        except ValueError:
            pass

    def _service(self, conn, mask):
        if mask & selectors.EVENT_WRITE:
            self._flush(conn)
        if conn.closed or not mask & selectors.EVENT_READ:
            return
        try:
            data = conn.sock.recv(CHUNK)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            self._close(conn, tell=True)
            return
        if conn.refusing is not None:
            self._refuse(conn, data)
            return
        if not data:
            conn.eof_in = True
            if self.open_door:
                self.emitter.emit({'type': 'net_end', 'id': conn.id})
            if conn.eof_out and not conn.out:
                self._close(conn, tell=False)
            else:
                self._interest(conn)
            return
        conn.unacked += len(data)
        self.emitter.emit({'type': 'net_data', 'id': conn.id,
                           'data': binascii.b2a_base64(data, newline=False).decode('ascii')})
        if conn.unacked >= WINDOW:
            self._interest(conn)

    def _flush(self, conn):
        while conn.out:
            chunk = conn.out[0]
            try:
                sent = conn.sock.send(chunk)
            except (BlockingIOError, InterruptedError):
                break
            except OSError:
                self._close(conn, tell=True)
                return
            conn.written += sent
            if sent < len(chunk):
                conn.out[0] = chunk[sent:]
                break
            conn.out.popleft()
        if conn.written and self.open_door:
            self.emitter.emit({'type': 'net_ack', 'id': conn.id, 'bytes': conn.written})
            conn.written = 0
        if not conn.out and conn.eof_out:
            try:
                conn.sock.shutdown(_socket.SHUT_WR)
            except OSError:
                pass
            if conn.eof_in:
                self._close(conn, tell=False)
                return
        self._interest(conn)

    def _woken(self):
        """Applies what the gateway sent (dispatch queued it) and the ends of executions."""
        while self.ops:
            item = self.ops.popleft()
            kind = item[0]
            if kind == 'exec_end':
                # What the execution opened ends with it: a later run has its own grant.
                for conn in [c for c in self.conns.values() if c.exec_id == item[1]]:
                    self._close(conn, tell=True)
                continue
            conn = self.conns.get(item[1])
            if conn is None or conn.closed:
                continue
            if kind == 'data':
                queued = sum(len(c) for c in conn.out) + len(item[2])
                if queued > 2 * WINDOW:
                    # The gateway does not keep to the window: this is not the protocol.
                    diag('egress relay: %s over its window' % conn.id)
                    self._close(conn, tell=True)
                    continue
                conn.out.append(item[2])
                self._flush(conn)
            elif kind == 'ack':
                conn.unacked = max(0, conn.unacked - item[2])
                self._interest(conn)
            elif kind == 'end':
                conn.eof_out = True
                self._flush(conn)
            elif kind == 'close':
                self._close(conn, tell=False)

    def _close(self, conn, tell):
        if conn.closed:
            return
        conn.closed = True
        self.conns.pop(conn.id, None)
        try:
            self.sel.unregister(conn.sock)
        except (KeyError, ValueError):
            pass
        try:
            conn.sock.close()
        except OSError:
            pass
        if tell and self.open_door:
            self.emitter.emit({'type': 'net_close', 'id': conn.id})
