"""Tests for runner.py, run on the host: python3 -m unittest sandbox/runner/test_runner.py

Each test starts the runner as a subprocess with its workspace, /tmp and bridge socket in
a temporary directory (SANDGATE_WORKSPACE, SANDGATE_TMP) and plays the gateway over its
stdin/stdout. Deno comes from node_modules (SANDGATE_DENO overrides); tests that need
Deno, numpy or matplotlib are skipped when those are missing.
"""
import importlib.util
import json
import os
import queue
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
RUNNER = os.path.join(HERE, 'runner.py')
DENO = os.environ.get('SANDGATE_DENO') or os.path.normpath(
    os.path.join(HERE, '..', '..', 'node_modules', '@deno', 'linux-x64-glibc', 'deno'))
HAS_DENO = os.access(DENO, os.X_OK)
sys.path.insert(0, HERE)
from runner_base import OWN_MODULES  # noqa: E402


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
        self.proc = subprocess.Popen(argv or [sys.executable, RUNNER], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self.stderr, env=env, cwd=self.ws)
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
                   deno_flags=None, exec_id=None, fs=None, reset=None):
        self.seq += 1
        exec_id = exec_id or 'e%d' % self.seq
        req = {'op': 'exec', 'id': exec_id, 'language': language, 'code': code, 'timeoutMs': timeout_ms,
               'outputLimit': output_limit, 'env': self.exec_env if env is None else env,
               'denoFlags': deno_flags or []}
        if fs is not None:
            req['fs'] = fs
        if reset is not None:
            req['reset'] = reset
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


class RunnerTest(unittest.TestCase):
    def setUp(self):
        self.r = Runner()
        self.addCleanup(self.r.close)

    # --- start and protocol hygiene

    def test_ready_first_and_fast(self):
        self.assertEqual(self.r.ready['type'], 'ready')
        self.assertEqual(self.r.ready['pid'], self.r.proc.pid)
        self.assertEqual(self.r.ready['versions']['python'], sys.version.split()[0])
        self.assertLess(self.r.ready_seconds, 1.0)

    def test_ping_reports_deno_version_later(self):
        if not HAS_DENO:
            self.skipTest('no deno')
        end = time.monotonic() + 10
        while time.monotonic() < end:
            self.r.send({'op': 'ping', 'id': 'p'})
            pong = self.r.next(lambda e: e['type'] == 'pong')
            self.assertEqual(pong['id'], 'p')
            if 'deno' in pong['versions']:
                self.assertRegex(pong['versions']['deno'], r'^\d+\.\d+')
                return
            time.sleep(0.1)
        self.fail('deno version never reported')

    def test_recorded_deno_version_is_reported_without_running_deno(self):
        # As in the image: the version recorded at build time, and no Deno run for it.
        d = tempfile.mkdtemp(prefix='sandgate-test-')
        self.addCleanup(shutil.rmtree, d, True)
        marker = os.path.join(d, 'deno-ran')
        fake = os.path.join(d, 'deno')
        with open(fake, 'w') as f:
            f.write('#!/bin/sh\ntouch %s\necho "deno 0.0.1 (fake)"\n' % marker)
        os.chmod(fake, 0o755)
        recorded = os.path.join(d, 'deno-version')
        with open(recorded, 'w') as f:
            f.write('9.8.7\n')
        r = Runner(SANDGATE_DENO=fake, SANDGATE_DENO_VERSION_FILE=recorded)
        self.addCleanup(r.close)
        self.assertEqual(r.ready['versions']['deno'], '9.8.7')
        time.sleep(1.0)  # the probe would have run 0.3 s after start
        r.send({'op': 'ping', 'id': 'p'})
        self.assertEqual(r.next(lambda e: e['type'] == 'pong')['versions']['deno'], '9.8.7')
        self.assertFalse(os.path.exists(marker))
        # Without a usable record, the probe runs that Deno.
        with open(recorded, 'w') as f:
            f.write('garbage\n')
        r2 = Runner(SANDGATE_DENO=fake, SANDGATE_DENO_VERSION_FILE=recorded)
        self.addCleanup(r2.close)
        self.assertNotIn('deno', r2.ready['versions'])
        end = time.monotonic() + 10
        while time.monotonic() < end and not os.path.exists(marker):
            time.sleep(0.05)
        self.assertTrue(os.path.exists(marker))

    def test_malformed_input_is_logged_and_ignored(self):
        for bad in ['garbage', '[1, 2]', '{"op": "nope"}', '{"op": "exec"}']:
            self.r.send(bad)
            log = self.r.next(lambda e: True)
            self.assertEqual((log['type'], log['level']), ('log', 'error'), bad)
        self.r.send({'op': 'exec', 'id': 'bad', 'language': 'cobol', 'code': ''})
        done = self.r.next(lambda e: e.get('id') == 'bad')
        self.assertEqual(done['type'], 'done')
        self.assertIn('unknown language', done['notice'])
        _, _, done = self.r.run('1+1')
        self.assertEqual(done['result'], '2')

    # --- python

    def test_python_state_persists(self):
        self.r.run('x = 20\ndef double(v):\n    return v * 2')
        _, _, done = self.r.run('double(x) + 2')
        self.assertEqual((done['exitCode'], done['result']), (0, '42'))

    def test_final_expression_result(self):
        out, _, done = self.r.run('print("hello")\n"a" + "b"')
        self.assertEqual(out, 'hello\n')
        self.assertEqual(done['result'], "'ab'")
        for code in ['None', 'print(3)', 'x = 1', '']:
            _, _, done = self.r.run(code)
            self.assertNotIn('result', done, code)
            self.assertEqual(done['exitCode'], 0, code)
        _, _, done = self.r.run('list(range(100000))')
        self.assertLess(len(done['result']), 5000)
        self.assertRegex(done['result'], r'more characters\]$')
        _, _, done = self.r.run('_[:3]')
        self.assertEqual(done['result'], '[0, 1, 2]')

    def test_top_level_await(self):
        _, _, done = self.r.run('import asyncio\nawait asyncio.sleep(0.01)\nawait asyncio.sleep(0, result=7)')
        self.assertEqual(done['result'], '7')

    def test_exception(self):
        self.r.run('kept = 1')
        _, err, done = self.r.run('def f():\n    raise ValueError("bad value")\nf()')
        self.assertEqual(done['exitCode'], 1)
        self.assertEqual(done['error']['name'], 'ValueError')
        self.assertEqual(done['error']['message'], 'bad value')
        self.assertIn('raise ValueError("bad value")', done['error']['traceback'])
        self.assertNotIn('kernel.py', done['error']['traceback'])
        self.assertIn('ValueError: bad value', err)
        self.assertFalse(done['restarted'])
        _, _, done = self.r.run('kept')
        self.assertEqual(done['result'], '1')

    def test_syntax_error_and_system_exit(self):
        _, err, done = self.r.run('1 +')
        self.assertEqual(done['error']['name'], 'SyntaxError')
        self.assertIn('SyntaxError', err)
        _, _, done = self.r.run('import sys; sys.exit(4)')
        self.assertEqual((done['exitCode'], done['restarted']), (4, False))

    def test_streaming_before_completion(self):
        exec_id = self.r.start_exec('import time\nfor i in range(3):\n    print("tick", i)\n    time.sleep(0.4)')
        first_at, first = self.r.next(lambda e: e.get('id') == exec_id, timed=True)
        self.assertEqual(first, {'type': 'stdout', 'id': exec_id, 'data': 'tick 0\n'})
        done_at, done = self.r.next(lambda e: e.get('type') == 'done', timed=True)
        self.assertGreater(done_at - first_at, 0.6)

    def test_low_level_and_subprocess_output(self):
        out, err, done = self.r.run(
            'import os, subprocess, sys\nos.write(1, b"raw\\n")\nsys.stdout.write("py\\n")\n'
            'subprocess.run(["echo", "child"])\nos.write(2, b"rawerr\\n")')
        self.assertEqual(out, 'raw\npy\nchild\n')
        self.assertEqual(err, 'rawerr\n')

    def test_output_cap(self):
        out, err, done = self.r.run('print("x" * 10000)\nprint("e" * 50, file=__import__("sys").stderr)',
                                    output_limit=1000)
        self.assertEqual(out, 'x' * 1000)
        self.assertEqual(done['truncated'], {'stdout': 9001, 'stderr': 0})
        self.assertIn('[sandgate: output truncated, 9001 bytes not shown]', err)
        # A multi-byte character is never split.
        out, _, done = self.r.run('print("é" * 100)', output_limit=51)
        self.assertEqual(out, 'é' * 25)
        self.assertEqual(done['truncated']['stdout'], 151)

    def test_output_cap_keeps_draining(self):
        # 20 MB through a 1 KB cap: the process must not block on a full pipe.
        out, _, done = self.r.run('import sys\nfor _ in range(2000):\n    sys.stdout.write("y" * 10000)\n"end"',
                                  output_limit=1024, timeout_ms=20_000)
        self.assertEqual((done['result'], len(out)), ("'end'", 1024))
        self.assertEqual(done['truncated']['stdout'], 20_000_000 - 1024)

    def test_timeout_kills_and_restarts(self):
        self.r.run('lost = 1')
        started = time.monotonic()
        _, _, done = self.r.run('while True:\n    pass', timeout_ms=500)
        self.assertLess(time.monotonic() - started, 3)
        self.assertTrue(done['timedOut'] and done['killed'] and done['restarted'])
        self.assertIsNone(done['exitCode'])
        self.assertIn('timed out', done['notice'])
        self.assertIn('variables', done['notice'])
        _, _, done = self.r.run('1 + 1')
        self.assertEqual((done['result'], done['restarted']), ('2', False))
        _, _, done = self.r.run('lost')
        self.assertEqual(done['error']['name'], 'NameError')

    def test_timeout_kills_kernel_children(self):
        out, _, _ = self.r.run('import subprocess\np = subprocess.Popen(["sleep", "60"])\nprint(p.pid)')
        child = int(out)
        _, _, done = self.r.run('import time\ntime.sleep(60)', timeout_ms=300)
        self.assertTrue(done['timedOut'])
        time.sleep(0.2)
        self.assertFalse(pid_alive(child))

    def test_kernel_death_is_reported(self):
        _, _, done = self.r.run('import os\nos._exit(3)')
        self.assertTrue(done['killed'] and done['restarted'])
        self.assertEqual(done['exitCode'], 3)
        self.assertIn('died', done['notice'])
        _, _, done = self.r.run('import os, signal\nos.kill(os.getpid(), signal.SIGKILL)')
        self.assertIsNone(done['exitCode'])
        self.assertIn('SIGKILL', done['notice'])
        _, _, done = self.r.run('2 + 2')
        self.assertEqual(done['result'], '4')

    def test_memory_limit_turns_oom_into_memory_error(self):
        r = Runner(SANDGATE_KERNEL_MEMORY=str(400 << 20))
        self.addCleanup(r.close)
        r.run('kept = 1')
        _, _, done = r.run('x = bytearray(1 << 30)')
        self.assertEqual(done['error']['name'], 'MemoryError')
        self.assertFalse(done['restarted'])
        _, _, done = r.run('kept')
        self.assertEqual(done['result'], '1')

    def test_cancel(self):
        exec_id = self.r.start_exec('import time\nprint("started")\ntime.sleep(30)')
        self.r.next(lambda e: e.get('id') == exec_id and e['type'] == 'stdout')
        queued = self.r.start_exec('1')
        self.r.send({'op': 'cancel', 'id': 'c1', 'target': queued})
        done = self.r.next(lambda e: e.get('id') == queued)
        self.assertIn('Cancelled before it started', done['notice'])
        self.r.send({'op': 'cancel', 'id': 'c2', 'target': exec_id})
        done = self.r.next(lambda e: e.get('type') == 'done', timeout=5)
        self.assertEqual(done['id'], exec_id)
        self.assertTrue(done['killed'] and done['restarted'])
        self.assertFalse(done['timedOut'])
        self.assertIn('cancelled', done['notice'])

    def test_python_env_is_the_request_env(self):
        env = dict(self.r.exec_env, FOO='bar')
        _, _, done = self.r.run('import os\nsorted(os.environ)', env=env)
        self.assertEqual(eval(done['result']), sorted(list(env) + ['SANDGATE_BRIDGE', 'SANDGATE_EXEC_ID']))
        _, _, done = self.r.run('import os\nos.environ.get("FOO")', env={'OTHER': '1'})
        self.assertNotIn('result', done)

    def test_preload(self):
        self.r.send({'op': 'preload', 'id': 'p1', 'modules': ['json', 'no_such_module_xyz']})
        event = self.r.next(lambda e: e.get('id') == 'p1')
        self.assertEqual(event['type'], 'preloaded')
        self.assertEqual(event['modules'], ['json', 'no_such_module_xyz'])
        self.assertIn('no_such_module_xyz', event['error'])
        _, _, done = self.r.run('import sys\n"json" in sys.modules')
        self.assertEqual(done['result'], 'True')
        # Preloaded modules come back after a restart.
        self.r.run('import os\nos._exit(1)')
        _, _, done = self.r.run('import sys\n"json" in sys.modules')
        self.assertEqual(done['result'], 'True')

    def test_empty_preload_keeps_output_between_executions_out_of_the_logs(self):
        # A warm-up (empty preload) while a thread of user code prints: answered, and the
        # print goes nowhere, like any output between executions.
        self.r.run('import threading, time\n'
                   'def spam():\n'
                   '    while True:\n'
                   '        print("between-runs-" + "marker", flush=True)\n'
                   '        time.sleep(0.005)\n'
                   'threading.Thread(target=spam, daemon=True).start()')
        time.sleep(0.3)
        for i in range(3):
            self.r.send({'op': 'preload', 'id': 'w%d' % i, 'modules': []})
            event = self.r.next(lambda e: e.get('id') == 'w%d' % i)
            self.assertEqual((event['type'], event.get('error')), ('preloaded', None))
        _, _, done = self.r.run('1 + 1')
        self.assertEqual(done['result'], '2')
        self.r.stderr.flush()
        with open(self.r.stderr.name, 'rb') as f:
            self.assertNotIn(b'between-runs-marker', f.read())

    def test_a_kernel_that_ended_between_executions_is_reported_by_the_next_one_which_still_runs(self):
        # A thread of user code ends the kernel after its execution returned.
        self.r.run('x = 41\nimport os, threading, time\n'
                   'threading.Thread(target=lambda: (time.sleep(0.2), os._exit(7))).start()')
        time.sleep(0.6)
        _, _, done = self.r.run('"x" in globals()')
        self.assertEqual(done['result'], 'False')  # the code ran, in a new kernel
        self.assertTrue(done['restarted'])
        self.assertIn('The Python kernel had ended since the last execution (exit code 7)', done['notice'])
        _, _, done = self.r.run('x = 1\nx + 1')
        self.assertEqual((done['result'], done['restarted'], done.get('notice')), ('2', False, None))

    def test_a_bash_shell_that_ended_between_executions_is_reported_by_the_next_one_which_still_runs(self):
        _, _, done = self.r.run('kept=yes; (sleep 0.2; kill -KILL $$) >/dev/null 2>&1 &', language='bash')
        if done['restarted']:
            self.skipTest('the shell ends what a script leaves running here (separated runner)')
        time.sleep(0.6)
        out, _, done = self.r.run('echo "kept=${kept:-gone}"', language='bash')
        self.assertEqual(out.strip(), 'kept=gone')  # the script ran, in a new shell
        self.assertTrue(done['restarted'])
        self.assertIn('The bash shell had ended since the last execution (killed by SIGKILL', done['notice'])
        self.assertIn('Shell variables and functions of earlier executions are gone.', done['notice'])

    def test_a_kernel_that_ended_before_a_warm_up_is_still_reported_by_the_next_execution(self):
        # The gateway's warm-up of a frozen sandbox (an empty preload) finds it dead and
        # starts another: the next execution must still say the variables are gone.
        self.r.run('y = 1\nimport os, threading, time\n'
                   'threading.Thread(target=lambda: (time.sleep(0.2), os._exit(3))).start()')
        time.sleep(0.6)
        self.r.send({'op': 'preload', 'id': 'warm1', 'modules': []})
        self.assertIn('died', self.r.next(lambda e: e.get('id') == 'warm1').get('error', ''))
        _, _, done = self.r.run('"y" in globals()')
        self.assertEqual(done['result'], 'False')
        self.assertTrue(done['restarted'])
        self.assertIn('had ended since the last execution (exit code 3)', done['notice'])
        # A kernel that never ran code loses nothing: no notice when it ends.
        self.r.send({'op': 'preload', 'id': 'warm2', 'modules': []})
        self.r.next(lambda e: e.get('id') == 'warm2')
        _, _, done = self.r.run('1')
        self.assertFalse(done['restarted'])

    @unittest.skipUnless(has_module('numpy'), 'numpy missing on this host')
    def test_numpy(self):
        _, _, done = self.r.run('import numpy as np\nint(np.arange(6).reshape(2, 3).sum())')
        self.assertEqual(done['result'], '15')

    @unittest.skipUnless(has_module('matplotlib'), 'matplotlib missing on this host')
    def test_matplotlib_figures_saved(self):
        _, _, done = self.r.run('import matplotlib.pyplot as plt\nplt.plot([1, 2, 3])\nplt.figure()\nplt.bar([1], [2])')
        figs = [f for f in done['files'] if f['path'].startswith('figures/')]
        self.assertEqual(len(figs), 2, done)
        for f in figs:
            with open(os.path.join(self.r.ws, f['path']), 'rb') as fh:
                self.assertEqual(fh.read(8), b'\x89PNG\r\n\x1a\n')
        _, _, done = self.r.run('import matplotlib.pyplot as plt\nlen(plt.get_fignums())')
        self.assertEqual((done['result'], done['files']), ('0', []))

    # --- bash

    def test_bash(self):
        out, err, done = self.r.run('echo out; echo err >&2; pwd; exit 7', language='bash')
        self.assertEqual(out, 'out\n%s\n' % self.r.ws)
        self.assertEqual(err, 'err\n')
        self.assertEqual(done['exitCode'], 7)
        self.assertNotIn('result', done)

    def test_bash_env_is_the_request_env(self):
        out, _, _ = self.r.run('env', language='bash', env={'FOO': 'bar'})
        names = {line.split('=', 1)[0] for line in out.splitlines()}
        # bash itself adds PWD, SHLVL and _.
        self.assertEqual(names - {'PWD', 'SHLVL', '_', 'OLDPWD'}, {'FOO', 'SANDGATE_BRIDGE', 'SANDGATE_EXEC_ID'})

    def test_bash_shell_keeps_variables_not_environment(self):
        # Every bash execution runs in one long-lived shell: shell variables and functions
        # stay, like a terminal's; the environment, working directory and options do not.
        out, err, done = self.r.run('x=5; greet() { echo "hi $1"; }; export LEAK=1; cd /; set -u', language='bash',
                                    env={'FOO': 'one'})
        self.assertEqual(done['exitCode'], 0, err)
        out, err, done = self.r.run('echo "$x $FOO $(pwd) ${NOPE:-unset}"; greet you; env', language='bash',
                                    env={'FOO': 'two'})
        lines = out.splitlines()
        self.assertEqual(lines[:2], ['5 two %s unset' % self.r.ws, 'hi you'], err)
        names = {line.split('=', 1)[0] for line in lines[2:]}
        self.assertEqual(names - {'PWD', 'SHLVL', '_', 'OLDPWD'}, {'FOO', 'SANDGATE_BRIDGE', 'SANDGATE_EXEC_ID'})
        out, _, done = self.r.run('read -r line; echo "[$line]"', language='bash')
        self.assertEqual((out, done['exitCode']), ('[]\n', 0))  # stdin is /dev/null: nothing read
        # A script that ends the shell gets its exit code; the next one gets a new shell.
        out, _, done = self.r.run('echo bye; exit 3', language='bash')
        self.assertEqual((out, done['exitCode'], done['killed'], done['restarted']), ('bye\n', 3, False, True))
        self.assertIn('ended the bash shell', done['notice'])
        out, _, done = self.r.run('set -e; false; echo never', language='bash')
        self.assertEqual((out, done['exitCode']), ('', 1))
        out, _, done = self.r.run('echo "[${x:-gone}]"', language='bash')
        self.assertEqual((out, done['exitCode'], done['restarted']), ('[gone]\n', 0, False))
        out, _, done = self.r.run('x=1', language='bash')
        out, _, done = self.r.run('echo "[${x:-gone}]"', language='bash', reset=True)
        self.assertEqual(out, '[gone]\n')

    def test_bash_timeout_kills_the_group(self):
        _, _, done = self.r.run('sleep 60 & echo $! > bg.pid; sleep 60', language='bash', timeout_ms=400)
        self.assertTrue(done['timedOut'] and done['killed'] and done['restarted'])
        self.assertIn('The bash shell was restarted', done['notice'])
        with open(os.path.join(self.r.ws, 'bg.pid')) as f:
            bg = int(f.read())
        time.sleep(0.2)
        self.assertFalse(pid_alive(bg))

    def test_bash_background_does_not_hold_the_execution(self):
        started = time.monotonic()
        out, _, done = self.r.run('sleep 30 & echo quick', language='bash')
        self.assertEqual((out, done['exitCode']), ('quick\n', 0))
        self.assertLess(time.monotonic() - started, 2)

    # --- files

    def test_files_changed(self):
        with open(os.path.join(self.r.ws, 'old.txt'), 'w') as f:
            f.write('old')
        with open(os.path.join(self.r.ws, 'keep.txt'), 'w') as f:
            f.write('same')
        os.symlink('/etc', os.path.join(self.r.ws, 'link'))
        _, _, done = self.r.run(
            'import os\nos.makedirs("sub/deep")\nopen("sub/deep/new.txt", "w").write("hello")\n'
            'open("keep2.txt", "w").write("x")\nos.remove("old.txt")\nos.symlink("/usr", "link2")')
        self.assertEqual(done['files'], [
            {'path': 'keep2.txt', 'size': 1, 'change': 'created'},
            {'path': 'old.txt', 'size': 0, 'change': 'deleted'},
            {'path': 'sub/deep/new.txt', 'size': 5, 'change': 'created'},
        ])
        _, _, done = self.r.run('echo more >> keep2.txt', language='bash')
        self.assertEqual(done['files'], [{'path': 'keep2.txt', 'size': 6, 'change': 'modified'}])

    def test_deep_workspace_scan_is_bounded(self):
        # Folders nested far deeper than the scan goes: the run is reported, changes deep
        # down are not, and the result says why.
        deep = self.r.ws
        for i in range(200):
            deep = os.path.join(deep, 'd')
        os.makedirs(deep)
        _, _, done = self.r.run('import os\nopen("top.txt", "w").write("1")\nopen(%r + "/bottom.txt", "w").write("2")' % deep)
        self.assertEqual(done['files'], [{'path': 'top.txt', 'size': 1, 'change': 'created'}])
        self.assertIn('more than 64 levels deep', done['notice'])

    def test_forged_kernel_replies(self):
        # User code runs in the kernel and can write to the kernel's reply pipe: a reply
        # for another execution, an endless line and a reply with wrong types or sizes.
        code = (
            'import os\n'
            'args = open("/proc/self/cmdline", "rb").read().split(b"\\0")\n'
            'rep = int(args[5])  # python3 -u -c CODE REQUESTS REPLIES ...\n'
            'os.write(rep, b\'{"id": "another", "exitCode": 0, "result": "forged"}\\n\')\n'
            'os.write(rep, b"x" * (3 << 20))\n'
            'os.write(rep, b"\\n")\n'
            'print("still running")\n'
            '6 * 7')
        out, _, done = self.r.run(code)
        self.assertEqual((out, done['result'], done['exitCode']), ('still running\n', '42', 0))
        # A reply for this very execution is the code's own word for its result: taken,
        # but only with the types and sizes the protocol allows.
        code = (
            'import os, json\n'
            'args = open("/proc/self/cmdline", "rb").read().split(b"\\0")\n'
            'reply = {"id": os.environ["SANDGATE_EXEC_ID"], "exitCode": "zero", "result": "r" * 100000,\n'
            '         "error": {"name": 7, "message": "m" * 10000, "traceback": ["t"]}, "figureError": {"a": 1}}\n'
            'os.write(int(args[5]), json.dumps(reply).encode() + b"\\n")\n'
            'import time\ntime.sleep(1)')
        _, _, done = self.r.run(code)
        self.assertEqual(done['exitCode'], 1)
        self.assertLessEqual(len(done['result']), 4200 + 3)
        self.assertEqual(done['error']['name'], 'Error')
        self.assertLessEqual(len(done['error']['message']), 4096 + 3)
        self.assertEqual(done['error']['traceback'], '')
        self.assertNotIn('figures', done.get('notice') or '')
        # The kernel carries on with the next execution.
        _, _, done = self.r.run('1 + 1')
        self.assertEqual(done['result'], '2')

    # --- deno

    @unittest.skipUnless(HAS_DENO, 'deno missing')
    def test_typescript(self):
        out, err, done = self.r.run('const n: number = 6 * 7;\nconsole.log(`n=${n}`);\nconsole.error("warn")',
                                    language='typescript')
        self.assertEqual((out, err, done['exitCode']), ('n=42\n', 'warn\n', 0), err)

    @unittest.skipUnless(HAS_DENO, 'deno missing')
    def test_javascript_and_permission_denial(self):
        secret = os.path.join(self.r.dir, 'secret.txt')
        with open(secret, 'w') as f:
            f.write('s')
        code = 'console.log(Deno.readTextFileSync(%s));' % json.dumps(secret)
        out, err, done = self.r.run(code, language='javascript', deno_flags=['--allow-read=%s' % self.r.ws])
        self.assertEqual(done['exitCode'], 1)
        self.assertIn('Requires read access to "%s", run again with the --allow-read flag' % secret, err)
        out, err, done = self.r.run(code, language='javascript', deno_flags=['--allow-read=%s' % secret])
        self.assertEqual((out, done['exitCode']), ('s\n', 0), err)

    @unittest.skipUnless(HAS_DENO, 'deno missing')
    def test_deno_host_channel_takes_only_the_host(self):
        # Other processes that connect to the channel before the host (the name is no
        # secret) are refused, whatever they send, and those that send nothing do not
        # keep the host out.
        self.r.close()
        caught = {}

        def intrude(r):
            folder = os.path.join(r.tmp, '.sandgate', 'deno')

            def run():
                deadline = time.monotonic() + 10
                while time.monotonic() < deadline and 'sock' not in caught:
                    try:
                        names = [n for n in os.listdir(folder) if n.endswith('.sock')]
                    except OSError:
                        names = []
                    for name in names:
                        silent, s = [socket.socket(socket.AF_UNIX) for _ in range(20)], socket.socket(socket.AF_UNIX)
                        try:
                            for one in silent:
                                one.connect(os.path.join(folder, name))  # says nothing, stays
                            s.connect(os.path.join(folder, name))
                            s.sendall(b'{"ready":true}\n{"id":"e1","exitCode":0,"result":"FORGED"}\n')
                            caught['sock'], caught['silent'] = s, silent
                        except OSError:
                            s.close()
                            for one in silent:
                                one.close()
                    time.sleep(0.0005)
            caught['thread'] = threading.Thread(target=run, daemon=True)
            caught['thread'].start()

        self.r = Runner(before_start=intrude, SANDGATE_DENO_CEILING='[]')
        self.addCleanup(self.r.close)
        caught['thread'].join()
        self.assertIn('sock', caught, 'connected before the host did')
        out, err, done = self.r.run('console.log(6 * 7); "genuine"', language='typescript')
        self.assertEqual((out, done['exitCode'], done.get('result')), ('42\n', 0, '"genuine"'), err)
        caught['sock'].settimeout(5)
        try:  # closed by the runner unread (a reset), nothing sent
            self.assertEqual(caught['sock'].recv(100), b'')
        except ConnectionResetError:
            pass
        caught['sock'].close()
        for one in caught['silent']:
            one.settimeout(5)
            self.assertEqual(one.recv(100), b'')  # closed once the host was in
            one.close()
        self.assertIn('refused 21 connection(s) to the Deno host channel', self.r.stderr_text())
        self.assertEqual(os.listdir(os.path.join(self.r.tmp, '.sandgate', 'deno')), [])  # the name is gone

    @unittest.skipUnless(HAS_DENO, 'deno missing')
    def test_typescript_that_also_parses_as_javascript(self):
        # `f<number>(41)` is a generic call in TypeScript and `(f < number) > 41` in
        # JavaScript: TypeScript code is read as TypeScript.
        code = 'const id = (x: unknown) => x;\nconst f = (x) => x;\nf<number>(41) + 1'
        out, err, done = self.r.run(code, language='typescript')
        self.assertEqual((done['exitCode'], done.get('result')), (0, '42'), err)
        out, err, done = self.r.run('f<number, string>(1, 2)', language='typescript')
        self.assertEqual((done['exitCode'], done.get('result')), (0, '1'), err)
        out, err, done = self.r.run('console.log(1 + 1)', language='typescript')
        self.assertEqual((out, done['exitCode']), ('2\n', 0), err)

    @unittest.skipUnless(HAS_DENO, 'deno missing')
    def test_typescript_timeout(self):
        self.r.run('const kept: number = 1', language='typescript')
        _, _, done = self.r.run('while (true) {}', language='typescript', timeout_ms=1500)
        self.assertTrue(done['timedOut'] and done['killed'] and done['restarted'])
        self.assertIn('The Deno host was restarted', done['notice'])
        out, err, done = self.r.run('console.log(typeof kept)', language='typescript')
        self.assertEqual((out, done['exitCode']), ('undefined\n', 0), err)

    @unittest.skipUnless(HAS_DENO, 'deno missing')
    def test_typescript_keeps_top_level_names(self):
        ws = ['--allow-read=%s' % self.r.ws]
        cell = ('import { join } from "node:path";\n'
                'const n: number = 40;\nlet counter = 0;\n'
                'function bump(by: number): number { counter += by; return counter; }\n'
                'class Box<T> { constructor(public v: T) {} }\n'
                'const { a, b: [c] } = { a: 1, b: [2] };\n'
                'interface Unused { x: number }\n'
                'console.log("defined")')
        out, err, done = self.r.run(cell, language='typescript', deno_flags=ws)
        self.assertEqual((out, done['exitCode']), ('defined\n', 0), err)
        self.assertNotIn('result', done)  # console.log(...) is undefined
        out, err, done = self.r.run('bump(1); bump(n + a + c)', language='typescript', deno_flags=ws)
        self.assertEqual((done['exitCode'], done.get('result')), (0, '44'), err)
        out, err, done = self.r.run('counter = counter * 2;\n[join("x", "y"), new Box(counter).v]', language='typescript',
                                    deno_flags=ws)
        self.assertEqual(done.get('result'), '[ "x/y", 88 ]', err)
        # The same name declared again replaces it, as in Deno's REPL.
        out, err, done = self.r.run('const n = "again"; n', language='javascript', deno_flags=ws)
        self.assertEqual(done.get('result'), '"again"', err)
        # Errors point at the user's lines; the state survives them.
        out, err, done = self.r.run('const ok = 1;\n\nthrow new Error("third line")', language='typescript', deno_flags=ws)
        self.assertEqual((done['exitCode'], done['error']['message']), (1, 'third line'))
        self.assertRegex(done['error']['traceback'], r':3:7')
        self.assertIn('error: Uncaught Error: third line', err)
        out, err, done = self.r.run('let x: = 1', language='typescript', deno_flags=ws)
        self.assertEqual((done['exitCode'], done['error']['name']), (1, 'SyntaxError'))
        out, err, done = self.r.run('Deno.exit(5)', language='typescript', deno_flags=ws)
        self.assertEqual(done['exitCode'], 5)
        out, err, done = self.r.run('[ok, counter]', language='typescript', deno_flags=ws)
        self.assertEqual(done.get('result'), '[ 1, 88 ]', err)
        # reset: a fresh start.
        out, err, done = self.r.run('typeof counter', language='typescript', deno_flags=ws, reset=True)
        self.assertEqual(done.get('result'), '"undefined"', err)

    @unittest.skipUnless(HAS_DENO, 'deno missing')
    def test_typescript_state_is_kept_per_permission_set(self):
        secret = os.path.join(self.r.ws, 'secret.txt')
        with open(secret, 'w') as f:
            f.write('s')
        wide = ['--allow-read=%s' % self.r.ws]
        out, err, done = self.r.run('const read = () => Deno.readTextFileSync(%s); read()' % json.dumps(secret),
                                    language='typescript', deno_flags=wide)
        self.assertEqual(done.get('result'), '"s"', err)
        # A narrower run neither sees the wider run's function nor may read the file itself.
        out, err, done = self.r.run('typeof read', language='typescript', deno_flags=[])
        self.assertEqual(done.get('result'), '"undefined"', err)
        out, err, done = self.r.run('Deno.readTextFileSync(%s)' % json.dumps(secret), language='typescript', deno_flags=[])
        self.assertEqual(done['exitCode'], 1)
        self.assertIn('Requires read access to "%s"' % secret, err)
        # Back to the wider permissions: its state is there.
        out, err, done = self.r.run('read()', language='typescript', deno_flags=wide)
        self.assertEqual(done.get('result'), '"s"', err)

    # --- bridge

    def _answer_call(self, ok=True, result=None, error=None):
        call = self.r.next(lambda e: e['type'] == 'call')
        reply = {'op': 'call_result', 'id': call['id'], 'ok': ok}
        reply.update({'result': result} if ok else {'error': error})
        self.r.send(reply)
        return call

    def test_bridge_round_trip(self):
        self.assertEqual(os.stat(self.r.bridge).st_mode & 0o777, 0o600)
        code = ('import sys\nsys.path.insert(0, %r)\nfrom bridge_client import call, BridgeError\n'
                'r = call("tools/call", {"name": "echo", "n": 1})\nprint("got", r)\n'
                'try:\n    call("tools/call", {"name": "fail"})\nexcept BridgeError as e:\n    print("error", e)\n' % HERE)
        exec_id = self.r.start_exec(code)
        call = self._answer_call(result={'rows': [1, 2], 'text': 'ünï'})
        self.assertEqual((call['execId'], call['method'], call['params']),
                         (exec_id, 'tools/call', {'name': 'echo', 'n': 1}))
        self._answer_call(ok=False, error='upstream said no')
        out, err, done = self.r.collect(exec_id)
        self.assertEqual(out, "got {'rows': [1, 2], 'text': 'ünï'}\nerror upstream said no\n", err)

    def test_bridge_refuses_ended_executions(self):
        exec_id = self.r.start_exec('1')
        self.r.collect(exec_id)
        with socket.socket(socket.AF_UNIX) as s:
            s.settimeout(5)
            s.connect(self.r.bridge)
            s.sendall(json.dumps({'execId': exec_id, 'method': 'm', 'params': None}).encode() + b'\n')
            reply = json.loads(s.makefile('rb').readline())
        self.assertFalse(reply['ok'])
        self.assertIn('no running execution', reply['error'])

    def test_bridge_pending_call_fails_when_execution_ends(self):
        # The call is never answered; the timeout ends the execution and its call.
        exec_id = self.r.start_exec(
            'import sys\nsys.path.insert(0, %r)\nfrom bridge_client import call\ncall("slow")' % HERE, timeout_ms=500)
        call = self.r.next(lambda e: e['type'] == 'call')
        _, _, done = self.r.collect(exec_id)
        self.assertTrue(done['timedOut'])
        self.r.send({'op': 'call_result', 'id': call['id'], 'ok': True, 'result': 1})
        log = self.r.next(lambda e: e['type'] == 'log')
        self.assertEqual(log['level'], 'warn')

    def test_bridge_limits_calls_waiting_at_once(self):
        code = ('import json, os, socket\n'
                'socks = []\n'
                'for i in range(10):\n'
                '    s = socket.socket(socket.AF_UNIX)\n'
                '    s.connect(os.environ["SANDGATE_BRIDGE"])\n'
                '    s.sendall(json.dumps({"execId": os.environ["SANDGATE_EXEC_ID"], "method": "m", "params": i}).encode() + b"\\n")\n'
                '    socks.append(s)\n'
                'import time; time.sleep(0.5)\n'
                'refused = []\n'
                'for s in socks[8:]:\n'
                '    refused.append(json.loads(s.makefile().readline())["error"])\n'
                'print(refused)')
        self.r.send({'op': 'exec', 'id': 'e1', 'language': 'python', 'code': code, 'timeoutMs': 10000, 'outputLimit': 65536,
                     'env': self.r.exec_env, 'denoFlags': []})
        calls = [self.r.next(lambda e: e.get('type') == 'call') for _ in range(8)]
        self.assertEqual(len({c['id'] for c in calls}), 8)
        out = self.r.next(lambda e: e.get('type') == 'stdout')
        self.assertIn('8 calls are already waiting', out['data'])
        self.r.next(lambda e: e.get('type') == 'done')

    def test_bridge_client_may_half_close(self):
        code = ('import json, os, socket\ns = socket.socket(socket.AF_UNIX)\ns.connect(os.environ["SANDGATE_BRIDGE"])\n'
                's.sendall(json.dumps({"execId": os.environ["SANDGATE_EXEC_ID"], "method": "m"}).encode() + b"\\n")\n'
                's.shutdown(socket.SHUT_WR)\njson.loads(s.makefile().readline())')
        exec_id = self.r.start_exec(code)
        self._answer_call(result=5)
        _, err, done = self.r.collect(exec_id)
        self.assertEqual(done['result'], "{'ok': True, 'result': 5}", err)

    def test_bridge_from_bash(self):
        # The raw wire, as a client in any language sees it.
        code = ('python3 -c \'import json, os, socket\ns = socket.socket(socket.AF_UNIX)\n'
                's.connect(os.environ["SANDGATE_BRIDGE"])\n'
                's.sendall(json.dumps({"execId": os.environ["SANDGATE_EXEC_ID"], "method": "ping", "params": [1]}).encode() + b"\\n")\n'
                'print(s.makefile().readline(), end="")\'')
        exec_id = self.r.start_exec(code, language='bash', env=dict(self.r.exec_env))
        self._answer_call(result='pong')
        out, err, _ = self.r.collect(exec_id)
        self.assertEqual(json.loads(out), {'ok': True, 'result': 'pong'}, err)

    @unittest.skipUnless(HAS_DENO, 'deno missing')
    def test_bridge_from_deno(self):
        sock = self.r.bridge
        code = '''
const conn = await Deno.connect({ transport: "unix", path: Deno.env.get("SANDGATE_BRIDGE")! });
const req = { execId: Deno.env.get("SANDGATE_EXEC_ID"), method: "tools/list", params: {} };
await conn.write(new TextEncoder().encode(JSON.stringify(req) + "\\n"));
const text = await new Response(conn.readable).text();
console.log(JSON.parse(text).result.length);
'''
        flags = ['--allow-env=SANDGATE_BRIDGE,SANDGATE_EXEC_ID', '--allow-read=' + sock, '--allow-write=' + sock,
                 '--allow-net=unix:' + sock]
        exec_id = self.r.start_exec(code, language='typescript', deno_flags=flags)
        self._answer_call(result=['a', 'b', 'c'])
        out, err, done = self.r.collect(exec_id)
        self.assertEqual(out, '3\n', err)

    # --- lifecycle

    def test_executions_are_serialized_in_order(self):
        ids = [self.r.start_exec('import time\ntime.sleep(0.05)\n%d' % i) for i in range(5)]
        dones = [self.r.next(lambda e: e['type'] == 'done') for _ in ids]
        self.assertEqual([d['id'] for d in dones], ids)
        self.assertEqual([d['result'] for d in dones], [str(i) for i in range(5)])

    def test_ping_answers_during_an_execution(self):
        exec_id = self.r.start_exec('import time\ntime.sleep(1)')
        time.sleep(0.2)
        sent = time.monotonic()
        self.r.send({'op': 'ping', 'id': 'p'})
        at, pong = self.r.next(lambda e: e['type'] == 'pong', timed=True)
        self.assertLess(at - sent, 0.3)
        self.r.collect(exec_id)

    def test_stdin_eof_exits_and_kills_children(self):
        kernel = int(self.r.run('import os\nos.getpid()')[2]['result'])
        exec_id = self.r.start_exec('sleep 60', language='bash')
        time.sleep(0.3)
        self.r.proc.stdin.close()
        self.assertEqual(self.r.proc.wait(timeout=5), 0)
        time.sleep(0.2)
        self.assertFalse(pid_alive(kernel))
        self.assertFalse(os.path.exists(self.r.bridge))

    def test_no_leaks_over_many_executions(self):
        def usage():
            pid = self.r.proc.pid
            with open('/proc/%d/status' % pid) as f:
                rss = next(int(l.split()[1]) for l in f if l.startswith('VmRSS'))
            return rss, len(os.listdir('/proc/%d/fd' % pid)), threading_count(pid)

        langs = ('python', 'bash', 'typescript') if HAS_DENO else ('python', 'bash')
        code = {'python': 'print(%d)', 'bash': 'echo %d', 'typescript': 'console.log(%d)'}
        for lang in langs:
            self.r.run(code[lang] % 0, language=lang)
        end = time.monotonic() + 10  # the Deno version probe holds pipes until it ends
        while HAS_DENO and time.monotonic() < end:
            self.r.send({'op': 'ping', 'id': 'p'})
            if 'deno' in self.r.next(lambda e: e['type'] == 'pong')['versions']:
                break
        time.sleep(0.1)
        base = usage()
        for i in range(300):
            lang = langs[i % len(langs)]
            out, _, _ = self.r.run(code[lang] % i, language=lang)
            self.assertEqual(out, '%d\n' % i)
        rss, fds, threads = usage()
        self.assertEqual(fds, base[1])
        self.assertLessEqual(threads, base[2])  # the Deno version probe may have finished
        self.assertLess(rss - base[0], 3000, 'RSS grew by %d kB' % (rss - base[0]))

    def test_latency(self):
        self.r.run('1+1')
        samples = []
        for _ in range(200):
            t = time.perf_counter()
            _, _, done = self.r.run('1+1')
            samples.append(time.perf_counter() - t)
        samples.sort()
        p50 = samples[len(samples) // 2] * 1000
        sys.stderr.write('\n  python 1+1 round trip: p50 %.2f ms, p90 %.2f ms\n' % (p50, samples[180] * 1000))
        self.assertLess(p50, 20)


# The runner, with each malloc_trim written down (one line in $TRIM_LOG) before it runs.
COUNTED_TRIMS = """
import os, sys
sys.path.insert(0, %r)
sys.argv = [%r]
import runner_base
trim = runner_base.malloc_trim
def counted():
    with open(os.environ['TRIM_LOG'], 'a') as f:
        f.write('trim\\n')
    trim()
runner_base.malloc_trim = counted
import runner
runner.main()
""" % (HERE, RUNNER)


class TrimTest(unittest.TestCase):
    """The runner hands freed heap back once, 1 s after a job (TRIM_IDLE_SECONDS)."""

    def trims(self):
        try:
            with open(self.log) as f:
                return len(f.readlines())
        except FileNotFoundError:
            return 0

    def wait_trims(self, n):
        end = time.monotonic() + 10
        while self.trims() < n and time.monotonic() < end:
            time.sleep(0.05)
        return self.trims()

    def test_a_warm_up_does_not_arm_a_trim(self):
        # A warm-up (an empty preload) thaws a frozen sandbox for one round trip. Were it
        # to arm the trim, the trim would run at the next thaw, every 30 s, and the pages
        # it hands back be faulted in again by the warm-up after it.
        self.log = os.path.join(tempfile.mkdtemp(prefix='sandgate-trims-'), 'trims')
        self.addCleanup(shutil.rmtree, os.path.dirname(self.log), True)
        r = Runner(argv=[sys.executable, '-c', COUNTED_TRIMS], TRIM_LOG=self.log)
        self.addCleanup(r.close)
        self.assertEqual(self.wait_trims(1), 1)  # after start-up
        r.run('x = list(range(100000))')
        self.assertEqual(self.wait_trims(2), 2)
        for i in range(3):
            r.send({'op': 'preload', 'id': 'warm%d' % i, 'modules': []})
            self.assertEqual(r.next(lambda e: e.get('id') == 'warm%d' % i)['type'], 'preloaded')
        time.sleep(2.5)
        # The next job's trim is the only one more: none came from the warm-ups.
        r.run('y = 1')
        self.assertEqual(self.wait_trims(3), 3)
        time.sleep(1.5)
        self.assertEqual(self.trims(), 3)
        # A preload that imports something may leave garbage: it arms one.
        r.send({'op': 'preload', 'id': 'p1', 'modules': ['json']})
        r.next(lambda e: e.get('id') == 'p1')
        self.assertEqual(self.wait_trims(4), 4)
        # So does a warm-up that reads and drops what a background thread printed ...
        r.run('import threading, time\n'
              'threading.Thread(target=lambda: (time.sleep(0.3), print("x" * 100000)), daemon=True).start()')
        self.assertEqual(self.wait_trims(5), 5)
        time.sleep(0.6)
        r.send({'op': 'preload', 'id': 'warm-out', 'modules': []})
        r.next(lambda e: e.get('id') == 'warm-out')
        self.assertEqual(self.wait_trims(6), 6)
        # ... and one that finds the kernel ended and starts another.
        r.run('import os, threading, time\nthreading.Thread(target=lambda: (time.sleep(0.2), os._exit(3))).start()')
        self.assertEqual(self.wait_trims(7), 7)
        time.sleep(0.6)
        r.send({'op': 'preload', 'id': 'warm-dead', 'modules': []})
        r.next(lambda e: e.get('id') == 'warm-dead')
        self.assertEqual(self.wait_trims(8), 8)


class LeanTest(unittest.TestCase):
    """What keeps an idle sandbox small (see runner.py's docstring)."""

    HEAVY = {'json', 're', 'enum', 'subprocess', 'socket', 'signal', 'ast', 'traceback', 'linecache', 'tokenize',
             'ctypes'}

    def added_modules(self, code, *flags):
        """Modules that importing our module adds to those of a bare interpreter."""
        probe = ('import sys\nbase = set(sys.modules)\nsys.path.insert(0, %r)\nsys.argv = ["x"]\n%s\n'
                 'print(" ".join(sorted(set(sys.modules) - base)))' % (HERE, code))
        done = subprocess.run([sys.executable] + list(flags) + ['-c', probe], capture_output=True, text=True,
                              timeout=30, env=dict(os.environ, SANDGATE_TMP=tempfile.gettempdir()))
        self.assertEqual(done.returncode, 0, done.stderr)
        return set(done.stdout.split())

    def test_runner_imports_no_heavy_modules(self):
        self.assertEqual(self.added_modules('import runner', '-I', '-S') & self.HEAVY, set())

    def test_kernel_imports_no_heavy_modules(self):
        self.assertEqual(self.added_modules('import kernel') & self.HEAVY, set())

    def test_wire_is_json(self):
        sys.path.insert(0, HERE)
        import sandgate_wire
        values = [0, -1, 2 ** 70, 1.5, 1e300, -0.0, None, True, 'x', 'ünï "\\ \n\x00\u2028', '\ud800',
                  [], {}, {'a': [1, {'b': None}], 'é': 'ü'}]
        for value in values:
            for ascii_only in (False, True):
                self.assertEqual(sandgate_wire.dumps(value, ascii_only),
                                 json.dumps(value, ensure_ascii=ascii_only, separators=(',', ':')))
            text = json.dumps(value)
            if value == value:  # not NaN
                self.assertEqual(sandgate_wire.loads(text), json.loads(text))
                self.assertEqual(sandgate_wire.loads(text.encode()), json.loads(text))
        for bad in ('', '{', 'nope', '[1] x', '{"a" 1}', 'NaN', '[Infinity]', '{"a": -Infinity}'):
            with self.assertRaises(ValueError):
                sandgate_wire.loads(bad)
        # Not JSON either way: the gateway would take the line for a broken one.
        for value in (float('nan'), [float('inf')], {'a': float('-inf')}):
            with self.assertRaises(ValueError):
                sandgate_wire.dumps(value)

    def test_bytecode_cache(self):
        r = Runner()
        self.addCleanup(r.close)
        r.run('1')
        cache = os.path.join(r.tmp, '.sandgate', 'pycache')
        names = {name.split('.')[0] for _, _, files in os.walk(cache) for name in files}
        # Not lockdown: sandboxed code could write it, and it runs before the lockdown.
        self.assertEqual(names, set(OWN_MODULES))
        self.assertIn('runner_worker', names)
        _, _, done = r.run('import sys\n(sys.path[0], sys.argv, sorted(m for m in ("runner", "lockdown") if m in sys.modules))')
        self.assertEqual(done['result'], "('', [''], [])")

    def test_cell_sources_reach_linecache_when_it_is_imported(self):
        r = Runner()
        self.addCleanup(r.close)
        r.run('def f(x):\n    return x + 1\n')
        _, err, done = r.run('import inspect\ninspect.getsource(f)')
        self.assertEqual(done['result'], repr('def f(x):\n    return x + 1\n'), err)
        _, err, _ = r.run('import warnings\nwarnings.warn("careful")')
        self.assertIn('warnings.warn("careful")', err)
        _, err, _ = r.run('x = 1\nraise KeyError(x)')
        self.assertIn('raise KeyError(x)', err)


def narrowing_works():
    """Whether this host lets an unprivileged process make user+mount+pid namespaces
    (gVisor does; a host may not): lockdown.py's CLI running `true`."""
    try:
        done = subprocess.run([sys.executable, os.path.join(HERE, 'lockdown.py'), '{"readOnly": ["/"]}', 'true'],
                              stdin=subprocess.DEVNULL, capture_output=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return False
    return done.returncode == 0


NARROWING = narrowing_works()

# Tries, from narrowed code, everything that could undo the narrowing of WS and HIDDEN;
# prints one line per attempt ("<what>: blocked" or "<what>: UNDONE").
UNDO_PROBE = r'''
import ctypes, errno, os, subprocess, sys
ws, hidden = sys.argv[1], sys.argv[2]
libc = ctypes.CDLL(None, use_errno=True)
def report(what, undone):
    print('%s: %s' % (what, 'UNDONE' if undone else 'blocked'), flush=True)
def syscall(*args):
    return libc.syscall(*args) == 0
def can_write():
    try:
        open(os.path.join(ws, '.undo-probe'), 'w').close()
        os.unlink(os.path.join(ws, '.undo-probe'))
        return True
    except OSError:
        return False
def sees_hidden():
    return bool(os.listdir(hidden))
MS_REMOUNT, MS_BIND = 32, 4096
report('remount rw', syscall(165, ws.encode(), ws.encode(), None, ctypes.c_ulong(MS_REMOUNT | MS_BIND), None) and can_write())
report('umount hidden', syscall(166, hidden.encode(), 2) and sees_hidden())
report('unshare user+mount', syscall(272, 0x10000000 | 0x20000))
report('clone new user ns', libc.syscall(56, ctypes.c_ulong(0x10000000 | 17), None, None, None, None) > 0)
report('setns', syscall(308, 0, 0))
report('open_tree', libc.syscall(428, -100, ws.encode(), 1) >= 0)
report('fsopen', libc.syscall(430, b'tmpfs', 0) >= 0)
report('mount_setattr', syscall(442, -100, ws.encode(), 0, None, 0))
report('ptrace', syscall(101, 16, 1, None, None))
p = subprocess.run(['unshare', '-rm', 'sh', '-c', 'mount -o remount,bind,rw %s && touch %s/.undo' % (ws, ws)],
                   capture_output=True)
report('unshare -rm + remount', p.returncode == 0 or os.path.exists(os.path.join(ws, '.undo')))
p = subprocess.run(['unshare', '-rm', 'sh', '-c', 'umount -l %s && ls -A %s' % (hidden, hidden)], capture_output=True)
report('unshare -rm + umount', bool(p.stdout.strip()))
report('write', can_write())
report('list hidden', sees_hidden())
'''


@unittest.skipUnless(NARROWING, 'this host does not allow user namespaces (narrowing is tested in the container)')
class ScanTest(unittest.TestCase):
    """The workspace snapshot before and after every execution."""

    def setUp(self):
        sys.path.insert(0, HERE)
        import runner_files
        self.files = runner_files
        self.dir = tempfile.mkdtemp(prefix='sandgate-scan-')
        self.addCleanup(shutil.rmtree, self.dir)

    def write(self, rel, data='x'):
        path = os.path.join(self.dir, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, 'w') as f:
            f.write(data)

    def test_depth_bound(self):
        self.write('a/b/c/shallow.txt')
        self.write('/'.join(['d'] * 100) + '/deep.txt')
        scan = self.files.snapshot(self.dir, max_depth=10)
        self.assertIn('a/b/c/shallow.txt', scan.files)
        self.assertFalse(any(p.endswith('deep.txt') for p in scan.files))
        self.assertTrue(scan.depth_cut)
        self.assertFalse(scan.partial)  # a depth cut skips the same folders every time

    def test_entry_and_time_bounds(self):
        for i in range(600):
            self.write('many/f%03d' % i)
        scan = self.files.snapshot(self.dir, limit=100)
        self.assertEqual((scan.stopped, len(scan.files)), ('entries', 99))
        self.assertEqual(sorted(scan.files), ['many/f%03d' % i for i in range(99)])  # always the same prefix
        scan = self.files.snapshot(self.dir, max_seconds=0)
        self.assertEqual(scan.stopped, 'time')
        self.assertTrue(scan.partial)
        self.assertIn('took more than', self.files.scan_notice(scan, scan))

    def test_symlinks_are_not_followed(self):
        self.write('real/file.txt')
        outside = tempfile.mkdtemp(prefix='sandgate-outside-')
        self.addCleanup(shutil.rmtree, outside)
        with open(os.path.join(outside, 'secret.txt'), 'w') as f:
            f.write('s')
        os.symlink(outside, os.path.join(self.dir, 'link'))
        os.symlink(os.path.join(outside, 'secret.txt'), os.path.join(self.dir, 'file-link'))
        self.assertEqual(sorted(self.files.snapshot(self.dir).files), ['real/file.txt'])


class NarrowingTest(unittest.TestCase):
    """The exec `fs` field: readOnly paths read-only, hidden paths empty, for every
    language, and the code cannot undo either."""

    def setUp(self):
        self.r = Runner()
        self.addCleanup(self.r.close)
        self.hidden = os.path.join(self.r.dir, 'skills')
        os.makedirs(self.hidden)
        with open(os.path.join(self.hidden, 'SKILL.md'), 'w') as f:
            f.write('secret skill')
        with open(os.path.join(self.r.ws, 'data.txt'), 'w') as f:
            f.write('hello')
        self.fs = {'readOnly': [self.r.ws], 'hidden': [self.hidden]}

    def test_bash(self):
        out, err, done = self.r.run('cat data.txt; echo; ls -A %s | wc -l; touch nope.txt' % self.hidden,
                                    language='bash', fs=self.fs)
        self.assertEqual(out, 'hello\n0\n', err)
        self.assertIn('Read-only file system', err)
        self.assertNotEqual(done['exitCode'], 0)
        self.assertEqual(done['files'], [])
        # Nothing sticks: the next plain execution writes and sees everything.
        out, err, done = self.r.run('touch ok.txt && ls %s' % self.hidden, language='bash')
        self.assertEqual(out, 'SKILL.md\n', err)
        self.assertEqual(done['files'], [{'path': 'ok.txt', 'size': 0, 'change': 'created'}])

    def test_undo_attempts_fail(self):
        probe = os.path.join(self.r.dir, 'undo_probe.py')
        with open(probe, 'w') as f:
            f.write(UNDO_PROBE)
        out, err, _ = self.r.run('%s %s %s %s' % (sys.executable, probe, self.r.ws, self.hidden),
                                 language='bash', fs=self.fs)
        lines = out.splitlines()
        self.assertEqual(len(lines), 13, out + err)
        self.assertEqual([l for l in lines if not l.endswith(': blocked')], [], out + err)

    def test_hidden_workspace_and_cwd(self):
        # The cwd is looked up again after the mounts: it is the empty cover, not the workspace.
        out, err, _ = self.r.run('pwd; ls -A | wc -l; cat %s/data.txt' % self.r.ws, language='bash',
                                 fs={'readOnly': [], 'hidden': [self.r.ws]})
        self.assertEqual(out, '%s\n0\n' % self.r.ws, err)
        self.assertIn('No such file', err)

    def test_runner_state_is_read_only(self):
        state = os.path.dirname(self.r.bridge)
        out, err, _ = self.r.run('touch %s/planted 2>&1 | grep -c Read-only; rm %s 2>&1 | grep -c Read-only'
                                 % (state, self.r.bridge), language='bash', fs=self.fs)
        self.assertEqual(out, '1\n1\n', err)
        self.assertTrue(os.path.exists(self.r.bridge))

    def test_bridge_works_narrowed(self):
        code = ('python3 -c \'import json, os, socket\ns = socket.socket(socket.AF_UNIX)\n'
                's.connect(os.environ["SANDGATE_BRIDGE"])\n'
                's.sendall(json.dumps({"execId": os.environ["SANDGATE_EXEC_ID"], "method": "ping"}).encode() + b"\\n")\n'
                'print(s.makefile().readline(), end="")\'')
        exec_id = self.r.start_exec(code, language='bash', fs=self.fs)
        call = self.r.next(lambda e: e['type'] == 'call')
        self.r.send({'op': 'call_result', 'id': call['id'], 'ok': True, 'result': 'pong'})
        out, err, _ = self.r.collect(exec_id)
        self.assertEqual(json.loads(out), {'ok': True, 'result': 'pong'}, err)

    def test_leftover_processes_die_with_the_execution(self):
        # setsid takes the sleeper out of the process group; the pid namespace still ends it.
        out, err, done = self.r.run('setsid sleep 60 > /dev/null 2>&1 & echo $$; ps -e --no-headers | wc -l',
                                    language='bash', fs=self.fs)
        self.assertEqual(done['exitCode'], 0, err)
        self.assertEqual(out.split()[0], '1')  # pid 1 of its own namespace
        time.sleep(0.3)
        found = subprocess.run(['pgrep', '-f', '^sleep 60$'], capture_output=True, text=True).stdout.split()
        mine = [p for p in found if os.path.exists('/proc/%s' % p) and self._in_runner_tree(int(p))]
        self.assertEqual(mine, [])

    def _in_runner_tree(self, pid):
        # A sleeper left behind was reparented: recognise it by this runner's bridge path.
        try:
            with open('/proc/%d/environ' % pid, 'rb') as f:
                return self.r.bridge.encode() in f.read()
        except OSError:
            return False

    def test_timeout_kills_narrowed_bash(self):
        _, _, done = self.r.run('sleep 60', language='bash', fs=self.fs, timeout_ms=500)
        self.assertTrue(done['timedOut'] and done['killed'])

    def test_python_runs_in_a_separate_interpreter(self):
        self.r.run('kept = 41')
        out, err, done = self.r.run('print(open("data.txt").read())\nimport os\n(os.getpid(), "kept" in globals())',
                                    fs=self.fs)
        self.assertEqual(out, 'hello\n', err)
        self.assertEqual(done['result'], "(1, False)")
        self.assertIn('separate Python interpreter', done['notice'])
        self.assertFalse(done['restarted'])
        _, err, done = self.r.run('open("nope.txt", "w")', fs=self.fs)
        self.assertEqual(done['error']['name'], 'OSError', err)
        self.assertIn('Read-only file system', err)
        _, _, done = self.r.run('import os\nlen(os.listdir(%r))' % self.hidden, fs=self.fs)
        self.assertEqual(done['result'], '0')
        # The persistent kernel kept its state and its write access.
        _, err, done = self.r.run('open("ok.txt", "w").write("x")\nkept + 1')
        self.assertEqual((done['result'], done.get('notice')), ('42', None), err)

    def test_python_timeout_leaves_the_persistent_kernel_alone(self):
        self.r.run('kept = 1')
        _, _, done = self.r.run('while True:\n    pass', fs=self.fs, timeout_ms=500)
        self.assertTrue(done['timedOut'])
        self.assertFalse(done['restarted'])
        self.assertNotIn('variables and imports from earlier executions are gone', done['notice'])
        self.assertEqual(self.r.run('kept')[2]['result'], '1')

    @unittest.skipUnless(has_module('matplotlib'), 'matplotlib missing on this host')
    def test_python_figures_on_a_read_only_workspace(self):
        _, err, done = self.r.run('import matplotlib.pyplot as plt\nplt.plot([1, 2])\n7', fs=self.fs)
        self.assertEqual((done['exitCode'], done['result'], done['files']), (0, '7', []), err)
        self.assertIn('figures could not be saved', done['notice'])
        self.assertIn('Read-only file system', done['notice'])

    @unittest.skipUnless(HAS_DENO, 'deno missing')
    def test_deno(self):
        code = ('console.log(Deno.readTextFileSync("data.txt"));\n'
                'try { Deno.writeTextFileSync("nope.txt", "x") } catch (e) { console.log(String(e).includes("Read-only file system")) }\n'
                'console.log([...Deno.readDirSync(%s)].length)' % json.dumps(self.hidden))
        out, err, done = self.r.run(code, language='typescript', fs=self.fs, deno_flags=['--allow-all'])
        self.assertEqual(out, 'hello\ntrue\n0\n', err)

    def test_empty_narrowing_is_no_narrowing(self):
        out, err, done = self.r.run('touch ok.txt && echo $$', language='bash', fs={'readOnly': [], 'hidden': []})
        self.assertNotEqual(out, '1\n', err)
        self.assertEqual(done['exitCode'], 0)

    def test_invalid_fs_is_refused(self):
        for fs in ({'readOnly': ['relative']}, {'hidden': ['/']}, ['/x'], {'hidden': [1]}):
            _, _, done = self.r.run('echo ran', language='bash', fs=fs)
            self.assertTrue(done['notice'].startswith('invalid exec request:'), (fs, done))

    def test_narrowing_latency(self):
        def p50(fs, think):
            samples = []
            for _ in range(9):
                time.sleep(think)
                t = time.perf_counter()
                self.r.run('true', language='bash', fs=fs)
                samples.append(time.perf_counter() - t)
            return sorted(samples)[4] * 1000
        plain = p50(None, 0)
        back_to_back = p50(self.fs, 0)
        spare_ready = p50(self.fs, 0.5)  # the helper for the next one had time to start
        sys.stderr.write('\n  bash true: p50 %.1f ms plain, narrowed %.1f ms back to back, %.1f ms with a'
                         ' helper started ahead\n' % (plain, back_to_back, spare_ready))
        self.assertLess(spare_ready, plain + 2000)  # a sanity bound: the figures are what matters


def threading_count(pid):
    return len(os.listdir('/proc/%d/task' % pid))


if __name__ == '__main__':
    unittest.main()
