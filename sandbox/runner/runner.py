#!/usr/bin/env python3
"""sandgate runner: the long-lived process inside a user's sandbox container.

Requests arrive on stdin and events leave on stdout, one JSON object per line (see
PROTOCOL.md and src/sandboxes/protocol.ts). stdout carries only protocol lines; every
diagnostic goes to stderr.

Threads:
  main    reads stdin and dispatches; ping, cancel and call_result are answered at once
  worker  runs executions and preloads one at a time, in arrival order
  bridge  serves the Unix socket through which sandboxed code calls the gateway
  probe   finds Deno's version once, after start, where the image recorded none

Python runs in a kernel child process (kernel.py) that keeps its state between
executions; bash, TypeScript and JavaScript run as a fresh process each time. Every
process runs in its own session, so a timeout or cancel SIGKILLs its whole group. An
execution whose request narrows the file system (`fs`) runs through lockdown.py, in
namespaces of its own under a seccomp filter; narrowed Python gets a one-shot kernel.

This file starts the runner and dispatches requests; the parts are beside it:
  runner_base    settings, limits, diagnostics, the protocol writer
  runner_worker  the worker thread: one execution or preload at a time, and its `done`
  runner_kernel  the Python kernel child (kernel.py runs inside it)
  runner_procs   processes for user code, their groups, the Sweeper, lockdown helpers
  runner_output  output batching, limits and non-blocking reads
  runner_files   workspace snapshots and file changes
  runner_bridge  the socket through which code calls the gateway

Standard library only. Paths can be moved for tests: SANDGATE_WORKSPACE, SANDGATE_TMP,
SANDGATE_BRIDGE, SANDGATE_DENO, SANDGATE_UNSHARE; SANDGATE_KERNEL_MEMORY sets the kernel's
memory limit.

Memory: an idle sandbox keeps this process and the kernel for its whole life, so both
stay small. Started as a script, runner.py only compiles its own modules into a
bytecode cache and re-executes itself as `python3 -I -S` loading them from there
(sandgate_boot.py): compiling them in the process that stays would leave ~4 MB
behind, 1 MB for kernel.py, which every kernel loads the same way. -I -S: no site, no
.pth files. The runner uses the C modules under json, socket and signal directly
(sandgate_wire.py, _socket, _signal: the Python layers would load re and enum), starts
processes with os.posix_spawn instead of subprocess, and hands freed heap back to the
system (malloc_trim) once started and whenever it has been idle for a second after a job.
"""
import os
import sys

if __name__ == '__main__':
    # First stage (see sandgate_boot.py): fill the bytecode cache, then become the runner.
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import sandgate_boot
    from runner_base import OWN_MODULES, PYCACHE
    try:
        # Readable by the uid user code runs as (kernels load from it), writable by us only.
        os.makedirs(PYCACHE, mode=0o755, exist_ok=True)
        problems = sandgate_boot.write_cache(PYCACHE, OWN_MODULES)
    except OSError as exc:
        problems = [str(exc)]
    for problem in problems:
        sys.stderr.write('[runner] no bytecode cache for %s\n' % problem)
    os.execv(sys.executable, [sys.executable, '-I', '-S', '-c', sandgate_boot.command(PYCACHE, 'runner', OWN_MODULES)]
             + sys.argv[1:])

import _signal  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402

import sandgate_wire as wire  # noqa: E402
from runner_base import BRIDGE_PATH, DENO, DENO_VERSION_FILE, SEPARATED, STATE_DIR, STATE_DIR_MODE, WORKSPACE, Emitter, diag  # noqa: E402
from runner_bridge import Bridge  # noqa: E402
from runner_procs import Proc, end_group, read_line  # noqa: E402
from runner_worker import Worker  # noqa: E402


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


def dispatch(line, worker, bridge, emitter, versions):
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


def main():
    # Keep the protocol on a private copy of fd 1 and point fd 1 at stderr, so a stray
    # write to stdout (ours or a library's) can never corrupt the protocol stream.
    proto = os.fdopen(os.dup(1), 'wb')
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    emitter = Emitter(proto)

    prepare()
    bridge = Bridge(BRIDGE_PATH, emitter)
    try:
        bridge.bind()
    except OSError as exc:
        diag('bridge disabled: cannot listen on %s: %s' % (BRIDGE_PATH, exc))
        bridge.server = None
    versions = {'python': sys.version.split()[0]}
    recorded = deno_version()
    if recorded:
        versions['deno'] = recorded
    emitter.emit({'type': 'ready', 'pid': os.getpid(), 'versions': versions, 'separated': SEPARATED})

    worker = Worker(emitter, bridge)
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
    stdin = sys.stdin.buffer
    while True:
        line = stdin.readline()
        if not line:
            break
        if not line.strip():
            continue
        try:
            dispatch(line, worker, bridge, emitter, versions)
        except Exception as exc:  # never let one request take the runner down
            diag('dispatch: %r' % (exc,))
            emitter.log('error', 'could not handle a request: %r' % (exc,))
    stop()


if __name__ == '__main__':
    main()
