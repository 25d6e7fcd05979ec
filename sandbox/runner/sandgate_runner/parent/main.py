"""sandgate runner: the long-lived process inside a user's sandbox container (the
parent of every process that runs user code).

Requests arrive on stdin and events leave on stdout, one JSON object per line (see
PROTOCOL.md and src/sandboxes/protocol.ts). stdout carries only protocol lines; every
diagnostic goes to stderr.

Threads:
  main    reads stdin and dispatches; ping, cancel and call_result are answered at once
  worker  runs executions and preloads one at a time, in arrival order
  bridge  serves the Unix socket through which sandboxed code calls the gateway
  egress  carries connections to the gateway's egress proxy (only when it opened one)
  probe   finds Deno's version once, after start, where the image recorded none

Python runs in a kernel child process (kernel/main.py) that keeps its state between
executions; TypeScript and JavaScript run in the long-lived Deno host, bash in a
long-lived shell. Every process runs in its own session, so a timeout or cancel
SIGKILLs its whole group. An execution whose request narrows the file system (`fs`)
runs through the lockdown helper (helper/lockdown.py), in namespaces of its own under a
seccomp filter; narrowed Python gets a one-shot kernel.

This module starts the runner; the parts of parent/ beside it:
  settings         settings, limits, diagnostics
  gateway_channel  the protocol writer (Emitter) and the dispatch of request lines
  worker           the worker thread: the queue, one execution or preload at a time, its `done`
    pump             waiting on a process: its output forwarded until it ends or is stopped
    kernel_execs     Python in the kernel (and the protocol every long-lived process speaks)
    host_execs       TypeScript and JavaScript in the Deno host, bash in the shell
    process_execs    a process of its own per execution (narrowed ones)
    jobs, outcomes   requests as queued, and what a `done` says
  kernel_handle    the runner's handle on a Python kernel child
  deno_host, bash_shell, script_files   the other long-lived processes and their files
  procs, sweeper, narrowing   processes for user code, ending strays, lockdown helpers
  output           output batching, limits and non-blocking reads
  workspace_scan   workspace snapshots and file changes
  bridge_server    the socket through which code calls the gateway
  egress_relay     the loopback listener whose connections the gateway's egress proxy serves

Standard library only. Paths can be moved for tests: SANDGATE_WORKSPACE, SANDGATE_TMP,
SANDGATE_BRIDGE, SANDGATE_DENO, SANDGATE_UNSHARE; SANDGATE_KERNEL_MEMORY sets the kernel's
memory limit.

Memory: an idle sandbox keeps this process and the kernel for its whole life, so both
stay small. The first stage (../__main__.py) only compiles the modules into a bytecode
cache and re-executes itself as `python3 -I -S` loading them from there (../boot.py):
compiling them in the process that stays would leave ~4 MB behind, 1 MB for the
kernel, which every kernel loads the same way. -I -S: no site, no .pth files. The
runner uses the C modules under json, socket and signal directly (../wire.py, _socket,
_signal: the Python layers would load re and enum), starts processes with
os.posix_spawn instead of subprocess, and hands freed heap back to the system
(malloc_trim) once started and whenever it has been idle for a second after a job.
"""
import _signal
import os
import resource
import sys
import threading
import time

from .bridge_server import Bridge
from .egress_relay import EgressRelay
from .gateway_channel import Emitter, SocketChannel, dispatch
from .procs import Proc, end_group, read_line
from .settings import BRIDGE_PATH, DENO, EGRESS_PORT, DENO_VERSION_FILE, SEPARATED, STATE_DIR, STATE_DIR_MODE, WORKSPACE, diag
from .worker import Worker


def prepare():
    # Processes start in the runner's cwd (posix_spawn has no cwd of its own).
    try:
        os.chdir(WORKSPACE)
    except OSError as exc:
        diag('cannot enter the workspace %s: %s' % (WORKSPACE, exc))
    # Only the fds a child is given may reach it: none inherited from whoever started us.
    for name in os.listdir('/proc/self/fd'):
        if int(name) > 2:
            try:
                os.set_inheritable(int(name), False)
            except OSError:
                pass
    os.makedirs(STATE_DIR, mode=STATE_DIR_MODE, exist_ok=True)
    # Fails (and the runner with it) if someone else made the folder first.
    os.chmod(STATE_DIR, STATE_DIR_MODE)


def deno_version():
    """Deno's version as the image recorded it, or None."""
    try:
        with open(DENO_VERSION_FILE, 'rb') as f:
            version = f.read(64).strip().decode('ascii')
    except (OSError, UnicodeDecodeError):
        return None
    return version if version[:1].isdigit() else None


def probe_deno(versions):
    """Deno's version, found after `ready` by running it (~100 ms under gVisor), where
    the image recorded none (the runner outside a container)."""
    time.sleep(0.3)  # let the kernel boot first
    try:
        proc = Proc([DENO, '--version'])
        try:
            out, _ = read_line(proc.stdout, 60)
        finally:
            end_group(proc)
            proc.close()
        versions['deno'] = out.split()[1].decode()
    except (OSError, IndexError) as exc:
        diag('deno version unknown: %r' % (exc,))


def limit_processes():
    """Where the container runtime sets no ulimits (a pod), the runner does: SANDGATE_NPROC
    processes per uid (gVisor enforces it: a fork bomb gets EAGAIN) and 4096 open files,
    inherited by every process it starts."""
    nproc = os.environ.get('SANDGATE_NPROC')
    if not nproc:
        return
    try:
        n = int(nproc)
        resource.setrlimit(resource.RLIMIT_NPROC, (n, n))
        resource.setrlimit(resource.RLIMIT_NOFILE, (4096, 4096))
    except (ValueError, OSError) as exc:
        diag('could not set the process limits: %r' % (exc,))


def main():
    # Keep the protocol on a private copy of fd 1 and point fd 1 at stderr, so a stray
    # write to stdout (ours or a library's) can never corrupt the protocol stream.
    proto = os.fdopen(os.dup(1), 'wb')
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    limit_processes()
    # On a cluster the channel is a socket (SocketChannel); elsewhere the attached stdio.
    channel_path = os.environ.get('SANDGATE_RUNNER_SOCKET')
    emitter = Emitter(None if channel_path else proto)
    channel = None
    if channel_path:
        channel = SocketChannel(channel_path, emitter)
        channel.bind()

    prepare()
    bridge = Bridge(BRIDGE_PATH, emitter)
    try:
        bridge.bind()
    except OSError as exc:
        diag('bridge disabled: cannot listen on %s: %s' % (BRIDGE_PATH, exc))
        bridge.server = None
    relay = None
    if EGRESS_PORT:
        relay = EgressRelay(EGRESS_PORT, emitter, os.environ.get('SANDGATE_EGRESS_OPEN') == '1')
        try:
            relay.bind()
        except OSError as exc:
            diag('egress disabled: cannot listen on 127.0.0.1:%d: %s' % (EGRESS_PORT, exc))
            relay = None
    versions = {'python': sys.version.split()[0]}
    recorded = deno_version()
    if recorded:
        versions['deno'] = recorded
    emitter.emit({'type': 'ready', 'pid': os.getpid(), 'versions': versions, 'separated': SEPARATED})

    worker = Worker(emitter, bridge, relay)
    if relay is not None:
        threading.Thread(target=relay.serve_forever, name='egress', daemon=True).start()
    if bridge.server is not None:
        threading.Thread(target=bridge.serve_forever, name='bridge', daemon=True).start()
    threading.Thread(target=worker.run, name='worker', daemon=True).start()
    if not recorded:
        threading.Thread(target=probe_deno, args=(versions,), name='probe', daemon=True).start()

    def stop(*_):
        worker.shutdown()
        try:
            os.unlink(BRIDGE_PATH)
        except OSError:
            pass
        os._exit(0)

    _signal.signal(_signal.SIGTERM, stop)
    for line in (channel.lines() if channel else iter(sys.stdin.buffer.readline, b'')):
        if not line.strip():
            continue
        try:
            dispatch(line, worker, bridge, emitter, versions, relay)
        except Exception as exc:  # never let one request take the runner down
            diag('dispatch: %r' % (exc,))
            emitter.log('error', 'could not handle a request: %r' % (exc,))
    stop()

