"""The Deno host: the long-lived Deno process that lets a TypeScript or JavaScript
execution run without starting a process for it (deno/host.js, bundled from
sandbox/deno by scripts/build-deno-host.sh); this is the runner's handle on it.

It is spoken to like the Python kernel (one JSON line per request and per
reply, replies checked: user code shares its process). It runs with the user's
permission ceiling (SANDGATE_DENO_CEILING, the Deno flags the gateway computes for the
container) plus what it needs itself; every execution runs in a worker whose
permissions are that execution's own flags, enforced by Deno.

Deno cannot use an inherited descriptor (and refuses /proc/self/fd/N without
--allow-all), so its channel is a Unix socket it connects to (see DenoHost).
"""
import _socket
import os
from _operator import _compare_digest

from .. import wire
from .kernel_handle import Kernel
from .procs import Proc, set_nonblocking
from .settings import DENO, READ_CHUNK, RUNNER_DIR, SEPARATED, STATE_DIR, diag

HOST_DIR = os.path.join(RUNNER_DIR, 'deno')
HOST_SCRIPT = os.path.join(HOST_DIR, 'host.js')
CHANNEL_DIR = os.path.join(STATE_DIR, 'deno')
GRANTS = ('read', 'write', 'net', 'env', 'run', 'sys', 'ffi')


def host_env():
    """The host's environment: the container's, and in a sandbox with a way out the
    proxy variables (SANDGATE_EGRESS_ENV): Deno reads them once, when it starts, for every
    fetch and npm: import of every worker; the gateway's proxy applies each run's grant."""
    env = dict(os.environ)
    raw = os.environ.get('SANDGATE_EGRESS_ENV')
    if raw:
        try:
            extra = wire.loads(raw)
        except ValueError:
            extra = None
        if isinstance(extra, dict):
            env.update({k: v for k, v in extra.items() if isinstance(k, str) and isinstance(v, str)})
    return env


def ceiling_from_env():
    """The ceiling's Deno flags from the container's environment, or None."""
    raw = os.environ.get('SANDGATE_DENO_CEILING')
    if not raw:
        return None
    try:
        flags = wire.loads(raw.encode())
    except ValueError:
        return None
    if not isinstance(flags, list) or not all(isinstance(f, str) and f.startswith('--') for f in flags):
        return None
    return flags


def parse_flags(flags):
    """{grant: True | [items]} from --allow-* flags; other flags are left out."""
    grants = {}
    for flag in flags:
        name, eq, value = flag.partition('=')
        grant = name[len('--allow-'):] if name.startswith('--allow-') else None
        if grant not in GRANTS:
            continue
        if not eq:
            grants[grant] = True
        elif grants.get(grant) is not True:
            grants.setdefault(grant, [])
            grants[grant] += [v for v in value.split(',') if v and v not in grants[grant]]
    return grants


def merge_flags(*flag_lists):
    """The --allow-* flags that grant everything any of the lists grants."""
    merged = {}
    for flags in flag_lists:
        for grant, value in parse_flags(flags).items():
            if value is True or merged.get(grant) is True:
                merged[grant] = True
            else:
                merged[grant] = merged.get(grant, []) + [v for v in value if v not in merged.get(grant, [])]
    return ['--allow-%s' % g if merged[g] is True else '--allow-%s=%s' % (g, ','.join(merged[g]))
            for g in GRANTS if g in merged and merged[g]]


class DenoHost(Kernel):
    """The long-lived Deno process. `ceiling` (flags) is what it may grant; None until
    known (outside a container the first execution's flags serve).

    Its channel is one Unix socket connection: the runner listens on a random name in a
    folder only it can write to and writes that name and a random key to the host's
    stdin (a pipe of the runner's: nobody else can open it). The name is no secret (the
    host's own --allow flags show it); the key is. The first connection to send the
    whole key is the host's; any other is closed; then the runner stops listening and
    removes the name. (gVisor's SO_PEERCRED names the runner itself, not
    the peer, so the peer's pid cannot serve.) A connected socket cannot be opened again
    through /proc/<pid>/fd (a FIFO or a file can, with its own permissions, by any
    process of the same uid), so code of the sandbox user has no way into the channel
    but through the host itself."""

    label = 'Deno host'
    # Before it connected, its death and its key have no descriptor to show on: polled.
    watch_exit = True
    MAX_PENDING = 64  # connections that have not sent the key yet (the oldest goes first)

    def __init__(self, ceiling=None):
        super().__init__()
        self.ceiling = ceiling
        self.used = False  # an execution ran in it: restart it when it dies
        self.sock = None   # listening until the host connected, then the connection
        self.path = None   # the listening name, removed once the host connected
        self.key = None
        self.pending = []  # [socket, bytes received] of connections that have not shown the key
        self.connected = False
        self.refused = 0

    def start(self):
        os.makedirs(CHANNEL_DIR, mode=0o711 if SEPARATED else 0o700, exist_ok=True)
        self.path = os.path.join(CHANNEL_DIR, os.urandom(16).hex() + '.sock')
        self.key = os.urandom(16).hex().encode() + b'\n'
        try:
            self.sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM | _socket.SOCK_CLOEXEC)
            self.sock.bind(self.path)
            if SEPARATED:
                # Connecting takes write access to the name, and the runner may not chown
                # it (no CAP_CHOWN): the key is what keeps others out.
                os.chmod(self.path, 0o666)
            self.sock.listen(128)
            self.sock.setblocking(False)
            own = ['--allow-read=%s,%s' % (HOST_DIR, self.path), '--allow-write=%s' % self.path,
                   '--allow-net=unix:%s' % self.path, '--allow-env']
            # --no-config: a deno.json in /workspace is the user's, not the host's.
            argv = ([DENO, 'run', '--quiet', '--no-prompt', '--no-config', '--unstable-worker-options']
                    + merge_flags(self.ceiling or [], own)
                    + [HOST_SCRIPT, wire.dumps(self.ceiling or [])])
            self.proc = Proc(argv, host_env(), stdin_pipe=True)
            self.proc.write_stdin(self.path.encode() + b'\n' + self.key)
        except BaseException:
            self.close()
            raise
        # Polled (poll(2), by number) for connections, then for replies: see _accept.
        self.req_w = self.rep_r = self.sock.fileno()
        self.connected = False
        self.refused = 0
        self.rep_buf = bytearray()
        self.rep_skip = False
        self.first_alone = True
        self.ready = False
        set_nonblocking(self.proc.stdout, self.proc.stderr)

    def _accept(self):
        """Takes waiting connections and looks for the one that sent the key (judged
        only once whole: a connection learns nothing from being kept or closed early).
        That one then takes the listening socket's descriptor number (dup2), so that a
        poll already watching that number goes on watching it. Raises BlockingIOError
        while the host's connection has not shown the key."""
        for _ in range(64):  # then the next poll: a flood of connections cannot hold the worker
            try:
                fd, _ = self.sock._accept()
            except BlockingIOError:
                break
            self.pending.append([_socket.socket(fileno=fd), b''])
            if self._check_pending():
                return
            if len(self.pending) > self.MAX_PENDING:
                self._refuse(self.pending.pop(0)[0])
        if not self._check_pending():
            raise BlockingIOError

    def _check_pending(self):
        """True once the host's connection is the channel."""
        for entry in list(self.pending):
            conn, got = entry
            try:
                data = conn.recv(len(self.key) - len(got), _socket.MSG_DONTWAIT)
            except BlockingIOError:
                continue
            except OSError:
                data = b''
            entry[1] = got = got + data
            if data and len(got) < len(self.key):
                continue
            self.pending.remove(entry)
            if not data or not _compare_digest(got, self.key):
                self._refuse(conn)
                continue
            fd = self.sock.fileno()
            try:
                os.dup2(conn.fileno(), fd, inheritable=False)
                self.sock.detach()
                self.sock = _socket.socket(fileno=fd)
            finally:
                conn.close()
            for other, _ in self.pending:
                self._refuse(other)
            self.pending = []
            if self.refused:
                diag('refused %d connection(s) to the Deno host channel' % self.refused)
            self._unlink()
            self.connected = True
            return True
        return False

    def _refuse(self, conn):
        conn.close()
        self.refused += 1

    def read_chunk(self):
        if not self.connected:
            self._accept()
        try:
            return self.sock.recv(READ_CHUNK, _socket.MSG_DONTWAIT)
        except BlockingIOError:
            raise
        except OSError:  # reset: the host died with a request unread
            return b''

    def on_ready(self):
        """Writes block (a request is written whole); reads never do (MSG_DONTWAIT)."""
        self.sock.setblocking(True)

    def _unlink(self):
        if self.path:
            try:
                os.unlink(self.path)
            except OSError:
                pass
            self.path = None

    def close(self):
        self._unlink()
        for conn, _ in self.pending:
            conn.close()
        self.pending = []
        if self.sock is not None:
            self.sock.close()
            self.sock = None
        self.req_w = self.rep_r = None
        self.connected = self.ready = False
        if self.proc is not None:
            self.proc.close()
            self.proc = None
