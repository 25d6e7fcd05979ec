"""An execution's output on its way to the gateway: decoded as UTF-8 without splitting
a character, batched (sent after FLUSH_SECONDS or once FLUSH_BYTES are pending), cut at
the request's limit with the rest counted, and read from non-blocking pipes without
letting a writer that never stops hold the worker."""
import codecs
import os
import select
import time

from .settings import FLUSH_BYTES, FLUSH_SECONDS, READ_CHUNK, diag


def utf8_cut(data, n):
    """The largest k <= n such that data[:k] does not end inside a UTF-8 character."""
    k = n
    while k > 0 and k < len(data) and (data[k] & 0xC0) == 0x80:
        k -= 1
    return k


class StreamCapture:
    """One stream of one execution: keeps at most `limit` bytes, decodes UTF-8 across
    chunk boundaries and holds text until it is due to be sent."""

    def __init__(self, limit):
        self.limit = limit
        self.kept = 0
        self.truncated = 0
        self.full = False
        self.decoder = codecs.getincrementaldecoder('utf-8')('replace')
        self.pending = []
        self.pending_bytes = 0
        self.since = 0.0

    def feed(self, data, now):
        if self.full:
            self.truncated += len(data)
            return
        room = self.limit - self.kept
        if len(data) > room:
            cut = utf8_cut(data, room)
            self.truncated += len(data) - cut
            data = data[:cut]
            self.full = True
        self.kept += len(data)
        text = self.decoder.decode(data)
        if text:
            if not self.pending:
                self.since = now
            self.pending.append(text)
            self.pending_bytes += len(data)

    def take(self, final=False):
        if final:
            tail = self.decoder.decode(b'', final=True)
            if tail:
                self.pending.append(tail)
        text = ''.join(self.pending)
        self.pending.clear()
        self.pending_bytes = 0
        return text


class Output:
    """Both streams of one execution, batched into `stdout` / `stderr` events."""

    def __init__(self, emitter, exec_id, limit):
        self.emitter = emitter
        self.exec_id = exec_id
        self.streams = {'stdout': StreamCapture(limit), 'stderr': StreamCapture(limit)}

    def feed(self, name, data):
        cap = self.streams[name]
        cap.feed(data, time.monotonic())
        if cap.pending_bytes >= FLUSH_BYTES:
            self._send(name)

    def flush_due(self, now):
        for name, cap in self.streams.items():
            if cap.pending and now - cap.since >= FLUSH_SECONDS:
                self._send(name)

    def wait_hint(self, now):
        """Seconds until the next batch is due, or None when nothing is pending."""
        waits = [cap.since + FLUSH_SECONDS - now for cap in self.streams.values() if cap.pending]
        return max(0.0, min(waits)) if waits else None

    def _send(self, name, final=False):
        text = self.streams[name].take(final)
        if text:
            self.emitter.emit({'type': name, 'id': self.exec_id, 'data': text})

    def finish(self):
        """Sends what is left and, if anything was dropped, a final notice on stderr."""
        for name in self.streams:
            self._send(name, final=True)
        out, err = self.truncated()['stdout'], self.truncated()['stderr']
        if out or err:
            detail = ' (stdout %d, stderr %d)' % (out, err) if out and err else ''
            notice = '\n[sandgate: output truncated, %d bytes not shown%s]\n' % (out + err, detail)
            self.emitter.emit({'type': 'stderr', 'id': self.exec_id, 'data': notice})

    def truncated(self):
        return {name: cap.truncated for name, cap in self.streams.items()}


class DiagSink:
    """Stands in for Output when a kernel writes outside an execution (boot, preload)."""

    def feed(self, name, data):
        diag('kernel %s: %s' % (name, data.decode('utf-8', 'replace').rstrip()))

    def flush_due(self, now):
        pass

    def wait_hint(self, now):
        return None


class Discard(DiagSink):
    def __init__(self):
        self.bytes = 0  # how much was dropped

    def feed(self, name, data):
        self.bytes += len(data)


def drain_fd(fd):
    try:
        while os.read(fd, 4096):
            pass
    except BlockingIOError:
        pass


def read_available(streams, output, max_reads=64):
    """Reads what the (non-blocking) streams hold right now, without waiting; a writer
    that never stops cannot keep us here longer than max_reads chunks per stream."""
    for fd, name in streams.items():
        for _ in range(max_reads):
            try:
                data = os.read(fd, READ_CHUNK)
            except (BlockingIOError, OSError):
                break
            if not data:
                break
            output.feed(name, data)


def read_pending(streams, output):
    """Reads what the streams hold now into output: one poll, and reads only if needed."""
    poller = select.poll()
    for fd in streams:
        poller.register(fd, select.POLLIN)
    ready = {fd: streams[fd] for fd, _ in poller.poll(0) if fd in streams}
    if ready:
        read_available(ready, output)


def discard_pending(streams):
    """Reads and drops what the streams hold now."""
    read_pending(streams, Discard())


def read_into(fd, name, output):
    """Reads one chunk into output; False at EOF."""
    try:
        data = os.read(fd, READ_CHUNK)
    except BlockingIOError:
        return True
    except OSError:
        return False
    if not data:
        return False
    output.feed(name, data)
    return True
