"""The runner's end of its channel to the gateway (the container's attached stdio, or
on a cluster a socket the gateway reaches through `exec`: see PROTOCOL.md): events
leave as protocol lines through the Emitter, from any thread; each request line that
arrives is parsed and handed to the part that answers it (dispatch)."""
import os
import stat
import threading

from .. import wire
from .settings import SEPARATED


# Kept executions whose record is held at once (an execution the gateway asked to keep is
# recorded until it says it has the result: see `keep`). Beyond it the oldest finished
# record goes first, then the oldest.
MAX_KEPT = 16
KEPT_TYPES = ('stdout', 'stderr', 'done')


class Emitter:
    """Writes events to the protocol stream; safe to call from any thread.

    It also keeps the events of executions the gateway asked to keep (`exec` with
    `keep: true`): a long run's output and `done` outlive a gateway that went away
    meanwhile, and the next one claims them (`claim`) and lets them go (`release`). A
    record holds what the stream carried, which the output limit bounds."""

    def __init__(self, stream):
        self._stream = stream
        self._lock = threading.Lock()
        self._kept = {}  # exec id -> [finished, [protocol lines], language], in insertion order

    def set_stream(self, stream):
        """Events go to `stream` from now on (None: nobody listens, they are dropped)."""
        with self._lock:
            self._stream = stream

    def emit(self, event):
        line = wire.json_line(event)
        with self._lock:
            if self._kept and event.get('type') in KEPT_TYPES:
                record = self._kept.get(event.get('id'))
                if record is not None:
                    record[1].append(line)
                    if event['type'] == 'done':
                        record[0] = True
            self._write(line)

    def _write(self, line):
        if self._stream is None:
            return
        try:
            self._stream.write(line)
            self._stream.flush()
        except (OSError, ValueError):
            pass  # the gateway is gone; stdin EOF ends the runner

    def keep(self, exec_id, language):
        """Records the events of `exec_id` from now on."""
        with self._lock:
            if exec_id in self._kept:
                return
            while len(self._kept) >= MAX_KEPT:
                finished = [k for k, record in self._kept.items() if record[0]]
                del self._kept[finished[0] if finished else next(iter(self._kept))]
            self._kept[exec_id] = [False, [], language]

    def kept(self):
        """The kept executions not yet released, in the order they came: a gateway that
        adopts the sandbox follows those still pending before it runs anything else."""
        with self._lock:
            return [{'id': k, 'language': r[2], 'done': r[0]} for k, r in self._kept.items()]

    def claim(self, req_id, target):
        """Answers `claimed` with the record's state (`done`, `pending`: queued or
        running, or `unknown`) and then every event recorded so far, in order, as one
        write: nothing of the execution's own comes between (the lock is held), and what
        it sends later follows."""
        with self._lock:
            record = self._kept.get(target) if isinstance(target, str) else None
            state = 'unknown' if record is None else 'done' if record[0] else 'pending'
            lines = [wire.json_line({'type': 'claimed', 'id': req_id, 'target': target, 'state': state})]
            if record is not None:
                lines.extend(record[1])
            self._write(b''.join(lines))

    def release(self, target):
        """Forgets the record of `target` (the gateway has its result)."""
        with self._lock:
            self._kept.pop(target, None)

    def log(self, level, message):
        self.emit({'type': 'log', 'level': level, 'message': message})


def dispatch(line, worker, bridge, emitter, versions, relay=None):
    """One request line: ping, claim and release are answered here, at once; exec and
    preload are queued for the worker; cancel and call_result are handled at once, even
    while an execution runs."""
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
        emitter.emit({'type': 'pong', 'id': req.get('id'), 'versions': dict(versions), 'separated': SEPARATED,
                      'kept': emitter.kept(), 'execs': worker.execs()})
    elif op in ('exec', 'preload'):
        if op == 'exec' and req.get('keep') is True and isinstance(req.get('id'), str):
            emitter.keep(req['id'], req.get('language'))
        worker.submit(op, req)
    elif op == 'claim':
        emitter.claim(req.get('id'), req.get('target'))
    elif op == 'release':
        emitter.release(req.get('target'))
    elif op == 'cancel':
        worker.cancel(req.get('target'))
    elif op == 'call_result':
        bridge.deliver(req)
    elif op in ('net_data', 'net_ack', 'net_end', 'net_close'):
        if relay is not None:
            relay.deliver(req)
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
