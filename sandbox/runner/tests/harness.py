"""The harness every runner test uses (python3 -m unittest discover -s sandbox/runner/tests).

Each test starts the runner as a subprocess, as the image does (python3 -I -S
sandgate_runner), with its workspace, /tmp and bridge socket in a temporary directory
(SANDGATE_WORKSPACE, SANDGATE_TMP), and plays the gateway over its stdin/stdout
(Runner). Deno comes from node_modules (SANDGATE_DENO overrides); tests that need
Deno, numpy or matplotlib are skipped when those are missing.
"""
import importlib.util
import json
import os
import queue
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)  # sandbox/runner: what the image copies to /opt/sandgate/runner
PACKAGE = os.path.join(ROOT, 'sandgate_runner')
USER_DIR = os.path.join(PACKAGE, 'user')  # bridge_client, for code in the sandbox
LOCKDOWN = os.path.join(PACKAGE, 'helper', 'lockdown.py')
DENO = os.environ.get('SANDGATE_DENO') or os.path.normpath(
    os.path.join(ROOT, '..', '..', 'node_modules', '@deno', 'linux-x64-glibc', 'deno'))
HAS_DENO = os.access(DENO, os.X_OK)
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)


def has_module(name):
    return importlib.util.find_spec(name) is not None


class Runner:
    """A runner subprocess and the gateway side of the protocol."""

    def __init__(self, before_start=None, argv=None, **extra_env):
        self.dir = tempfile.mkdtemp(prefix='sandgate-test-')
        self.ws = os.path.join(self.dir, 'ws')
        self.tmp = os.path.join(self.dir, 'tmp')
        os.makedirs(self.ws)
        os.makedirs(self.tmp)
        if before_start:
            before_start(self)
        self.bridge = os.path.join(self.tmp, '.sandgate', 'bridge.sock')
        env = dict(os.environ, SANDGATE_WORKSPACE=self.ws, SANDGATE_TMP=self.tmp, SANDGATE_DENO=DENO,
                   MPLBACKEND='Agg', MPLCONFIGDIR=os.path.join(self.tmp, '.matplotlib'),
                   PYTHONDONTWRITEBYTECODE='1', PYTHONUNBUFFERED='1')
        env.pop('SANDGATE_BRIDGE', None)
        env.update(extra_env)
        # What a gateway would pass as each execution's complete environment.
        self.exec_env = {'PATH': os.environ.get('PATH', '/usr/bin:/bin'), 'LANG': 'C.UTF-8', 'HOME': self.ws,
                         'DENO_DIR': os.path.join(self.tmp, '.deno'), 'DENO_NO_UPDATE_CHECK': '1', 'NO_COLOR': '1',
                         'MPLBACKEND': 'Agg', 'MPLCONFIGDIR': os.path.join(self.tmp, '.matplotlib')}
        self.stderr = open(os.path.join(self.dir, 'runner.stderr'), 'wb')
        self.started = time.monotonic()
        # As the image starts it (sandbox/Dockerfile).
        self.proc = subprocess.Popen(argv or [sys.executable, '-I', '-S', PACKAGE], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=self.stderr, env=env, cwd=self.ws)
        self.events = queue.Queue()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()
        self.ready = self.next(lambda e: True, timeout=10)
        self.ready_seconds = time.monotonic() - self.started
        self.seq = 0

    def _read(self):
        for line in self.proc.stdout:
            self.events.put((time.monotonic(), json.loads(line)))
        self.events.put((time.monotonic(), None))

    def send(self, obj):
        line = obj if isinstance(obj, str) else json.dumps(obj)
        self.proc.stdin.write(line.encode() + b'\n')
        self.proc.stdin.flush()

    def next(self, pred, timeout=20, timed=False):
        """The next event matching pred (others are dropped)."""
        end = time.monotonic() + timeout
        while True:
            left = end - time.monotonic()
            if left <= 0:
                raise AssertionError('no matching event within %s s' % timeout)
            try:
                at, event = self.events.get(timeout=left)
            except queue.Empty:
                continue
            if event is None:
                raise AssertionError('runner exited: ' + self.stderr_text())
            if pred(event):
                return (at, event) if timed else event

    def start_exec(self, code, language='python', timeout_ms=10_000, output_limit=100_000, env=None,
                   deno_flags=None, exec_id=None, fs=None, reset=None, keep=None):
        self.seq += 1
        exec_id = exec_id or 'e%d' % self.seq
        req = {'op': 'exec', 'id': exec_id, 'language': language, 'code': code, 'timeoutMs': timeout_ms,
               'outputLimit': output_limit, 'env': self.exec_env if env is None else env,
               'denoFlags': deno_flags or []}
        if fs is not None:
            req['fs'] = fs
        if reset is not None:
            req['reset'] = reset
        if keep is not None:
            req['keep'] = keep
        self.send(req)
        return exec_id

    def collect(self, exec_id, timeout=30):
        """(stdout, stderr, done) of one execution."""
        out, err = [], []
        while True:
            event = self.next(lambda e: e.get('id') == exec_id, timeout)
            if event['type'] == 'stdout':
                out.append(event['data'])
            elif event['type'] == 'stderr':
                err.append(event['data'])
            elif event['type'] == 'done':
                return ''.join(out), ''.join(err), event

    def run(self, code, **kw):
        timeout = kw.pop('wait', 30)
        return self.collect(self.start_exec(code, **kw), timeout)

    def stderr_text(self):
        self.stderr.flush()
        with open(self.stderr.name, 'rb') as f:
            return f.read().decode(errors='replace')

    def close(self):
        try:
            self.proc.stdin.close()
        except OSError:
            pass
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.stderr.close()
        self.reader.join(timeout=5)
        self.proc.stdout.close()
        self.proc.stdin.close()
        shutil.rmtree(self.dir, ignore_errors=True)


def pid_alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie (not yet reaped by init) counts as dead.
    try:
        with open('/proc/%d/stat' % pid) as f:
            return f.read().rsplit(')', 1)[1].split()[0] != 'Z'
    except OSError:
        return False


def threading_count(pid):
    return len(os.listdir('/proc/%d/task' % pid))


class RunnerCase(unittest.TestCase):
    """A test with a runner of its own (self.r), closed at the end."""

    def setUp(self):
        self.r = Runner()
        self.addCleanup(self.r.close)


def narrowing_works():
    """Whether this host lets an unprivileged process make user+mount+pid namespaces
    (gVisor does; a host may not): helper/lockdown.py's CLI running `true`."""
    try:
        done = subprocess.run([sys.executable, LOCKDOWN, '{"readOnly": ["/"]}', 'true'],
                              stdin=subprocess.DEVNULL, capture_output=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return False
    return done.returncode == 0


NARROWING = narrowing_works()
