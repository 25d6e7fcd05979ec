"""Narrowed executions, the exec `fs` field (helper/lockdown.py; the runner's side:
parent/narrowing.py): readOnly paths read-only, hidden paths empty, for every language,
and nothing the code tries undoes either."""
import json
import os
import subprocess
import sys
import time
import unittest

from harness import HAS_DENO, NARROWING, RunnerCase, has_module


# Tries, from narrowed code, everything that could undo the narrowing of WS and HIDDEN;
# prints one line per attempt ("<what>: blocked" or "<what>: UNDONE").
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
class NarrowingTest(RunnerCase):
    """The exec `fs` field: readOnly paths read-only, hidden paths empty, for every
    language, and the code cannot undo either."""

    def setUp(self):
        super().setUp()
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


if __name__ == '__main__':
    unittest.main()
