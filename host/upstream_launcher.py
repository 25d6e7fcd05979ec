"""Starts one stdio upstream MCP server with no more reach than a sandbox's own code.

The gateway runs it as

  unshare --net --pid --fork --kill-child --ipc -- python3 -I -S upstream_launcher.py SPEC -- COMMAND ARGS...

so it starts as pid 1 of a new pid namespace, in a new network namespace that has
nothing but its own loopback (the host's 127.0.0.1, the gateway's port among it, is not
there), and dies with the gateway's side of the connection. SPEC is JSON:

  {"uid": U, "gid": G, "cwd": DIR, "env": [NAMES], "proxy": {"socket": PATH, "port": P} | null}

The server's environment is the launcher's own, reduced to the names in "env" (values
never travel on a command line, which every local user can read; Python adds LC_CTYPE
to its own environment, which must not reach the server).

It brings its loopback up, and when the server's network policy allows any network
(`public`, or an allow-list), listens on 127.0.0.1:P inside the namespace and relays
every connection to the gateway's egress proxy on the Unix socket PATH, which decides
host by host (src/upstream/egress-proxy.ts); the server finds it through HTTP_PROXY and
HTTPS_PROXY. Then it forks: the child drops to U:G (no supplementary group, no
capability, no_new_privs) and execs COMMAND with exactly the environment it was given;
the parent drops to the same user and relays until the server exits, then exits with
its status. U < 0 keeps the current user (a gateway that is not root runs this inside a
user namespace of its own). When the gateway's end of the server's stdin closes, or the
unshare process above dies, the launcher kills the server and exits: nothing outlives
its connection.

Standard library only; runs on the host's python3.
"""
import ctypes  # before privileges drop: the interpreter's library may not be readable after
import errno
import fcntl
import json
import os
import select
import selectors
import signal
import socket
import struct
import sys

SIOCGIFFLAGS = 0x8913
SIOCSIFFLAGS = 0x8914
IFF_UP = 0x1
PR_SET_NO_NEW_PRIVS = 38
PR_SET_PDEATHSIG = 1
CHUNK = 65536


def loopback_up():
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        req = struct.pack('16sH14x', b'lo', 0)
        flags = struct.unpack('16sH14x', fcntl.ioctl(s, SIOCGIFFLAGS, req))[1]
        fcntl.ioctl(s, SIOCSIFFLAGS, struct.pack('16sH14x', b'lo', flags | IFF_UP))
    finally:
        s.close()


def drop(uid, gid):
    if uid >= 0:
        os.setgroups([])
        os.setresgid(gid, gid, gid)
        os.setresuid(uid, uid, uid)
        if os.getuid() != uid or os.geteuid() != uid:
            raise OSError(errno.EPERM, 'could not drop privileges')
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), 'prctl(PR_SET_NO_NEW_PRIVS) failed')
    # A change of uid clears the parent-death signal unshare --kill-child set: set it again.
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def find_command(name, env):
    """The executable `name` stands for, as this (unprivileged) user can run it, or None."""
    if '/' in name:
        return name if os.access(name, os.X_OK) else None
    for folder in os.get_exec_path(env):
        path = os.path.join(folder, name)
        if os.path.isfile(path) and os.access(path, os.X_OK):
            return path
    return None


def relay(listener, socket_path, child, stdin):
    """Relays connections from inside the namespace to the egress proxy (when there is a
    listener) until the child exits, or until the gateway closes the server's stdin, when
    it kills the child; returns the child's wait status."""
    sel = selectors.PollSelector()
    if listener is not None:
        listener.setblocking(False)
        sel.register(listener, selectors.EVENT_READ, None)
    # Polled for no event: poll still reports POLLHUP once every writer is gone, and
    # nothing is read from it (the server reads its own stdin).
    hup = select.poll()
    hup.register(stdin, 0)
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    sel.register(wake_r, selectors.EVENT_READ, 'wake')
    peers = {}

    def close(sock):
        other = peers.pop(sock, None)
        for s in (sock, other):
            if s is None:
                continue
            peers.pop(s, None)
            try:
                sel.unregister(s)
            except (KeyError, ValueError):
                pass
            s.close()

    while True:
        pid, status = os.waitpid(child, os.WNOHANG)
        if pid:
            return status
        if hup.poll(0):
            os.kill(child, signal.SIGKILL)
            return os.waitpid(child, 0)[1]
        for key, _ in sel.select(0.5):
            if key.data == 'wake':
                try:
                    os.read(wake_r, 4096)
                except BlockingIOError:
                    pass
            elif key.data is None:
                try:
                    inner, _ = listener.accept()
                except BlockingIOError:
                    continue
                outer = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                try:
                    outer.connect(socket_path)
                except OSError:
                    inner.close()
                    outer.close()
                    continue
                for a, b in ((inner, outer), (outer, inner)):
                    a.setblocking(False)
                    peers[a] = b
                    sel.register(a, selectors.EVENT_READ, 'peer')
            else:
                sock = key.fileobj
                try:
                    data = sock.recv(CHUNK)
                except BlockingIOError:
                    continue
                except OSError:
                    data = b''
                if not data:
                    close(sock)
                    continue
                other = peers.get(sock)
                try:
                    other.setblocking(True)
                    other.sendall(data)
                    other.setblocking(False)
                except OSError:
                    close(sock)


def main():
    sep = sys.argv.index('--')
    spec = json.loads(sys.argv[1])
    argv = sys.argv[sep + 1:]
    uid, gid = int(spec['uid']), int(spec['gid'])
    loopback_up()
    listener = None
    proxy = spec.get('proxy')
    if proxy:
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(('127.0.0.1', int(proxy['port'])))
        listener.listen(64)
    child = os.fork()
    if child == 0:
        try:
            if listener is not None:
                listener.close()
            drop(uid, gid)
            os.chdir(spec['cwd'])
            env = {name: os.environ[name] for name in spec['env'] if name in os.environ}
            path = find_command(argv[0], env)
            if path is None:
                sys.stderr.write('sandgate: cannot start "%s": not found on PATH, or not executable by the server\'s '
                                 'unprivileged user\n' % argv[0])
                os._exit(127)
            os.execve(path, argv, env)
        except OSError as exc:
            sys.stderr.write('sandgate: cannot start "%s": %s\n' % (argv[0], exc))
        os._exit(127)
    # The parent keeps no part of the server's stdio (the gateway sees EOF when the
    # server exits) but a copy of stdin's read end, to notice the gateway closing it.
    stdin = os.dup(0)
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(null, 1)
    os.close(null)
    drop(uid, gid)
    status = relay(listener, proxy['socket'] if proxy else None, child, stdin)
    code = os.waitstatus_to_exitcode(status)
    os._exit(code if code >= 0 else 128 - code)


if __name__ == '__main__':
    main()
