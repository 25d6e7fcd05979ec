"""Python in the kernel (kernel/main.py; the runner's side: parent/kernel_handle.py,
parent/kernel_execs.py): state kept like a notebook's, results and errors, deaths and
restarts reported, preloads, figures, and replies that user code forged."""
import os
import sys
import time
import unittest

from harness import PACKAGE, ROOT, Runner, RunnerCase, has_module
from sandgate_runner.parent.kernel_handle import Kernel

# The runner, slowed down between a poll that found the kernel's reply pipe readable and
# the read of that pipe, so that the kernel goes on meanwhile (as it may on a busy machine).
SLOW_REPLY_READS = """
import selectors, sys, time
sys.path.insert(0, %r)
sys.argv = [%r]
select = selectors.PollSelector.select
def slow(self, timeout=None):
    events = select(self, timeout)
    if any(key.data == 'reply' for key, _ in events):
        time.sleep(0.05)
    return events
selectors.PollSelector.select = slow
import sandgate_runner.parent.main as main
main.main()
""" % (ROOT, PACKAGE)


class PythonKernelTest(RunnerCase):
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
        self.assertNotIn('sandgate_runner', done['error']['traceback'])  # the kernel's own frames
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

    def test_cell_sources_reach_linecache_when_it_is_imported(self):
        self.r.run('def f(x):\n    return x + 1\n')
        _, err, done = self.r.run('import inspect\ninspect.getsource(f)')
        self.assertEqual(done['result'], repr('def f(x):\n    return x + 1\n'), err)
        _, err, _ = self.r.run('import warnings\nwarnings.warn("careful")')
        self.assertIn('warnings.warn("careful")', err)
        _, err, _ = self.r.run('x = 1\nraise KeyError(x)')
        self.assertIn('raise KeyError(x)', err)


    def test_output_before_a_reply_behind_user_bytes_is_kept(self):
        # User code writes to the reply pipe, so the runner's poll finds it readable
        # before the kernel has printed and replied; the reply then comes in the same
        # read as those bytes. What the code printed before the reply is still its output.
        r = Runner(argv=[sys.executable, '-c', SLOW_REPLY_READS])
        self.addCleanup(r.close)
        for junk in (b'not json', b'{"id": "another", "exitCode": 0, "result": "forged"}'):
            code = ('import os, time\n'
                    'args = open("/proc/self/cmdline", "rb").read().split(b"\\0")\n'
                    'os.write(int(args[5]), %r + b"\\n")\n'
                    'time.sleep(0.01)\n'
                    'print("printed before the reply")\n'
                    '6 * 7' % junk)
            out, err, done = r.run(code)
            self.assertEqual((out, done['result']), ('printed before the reply\n', '42'), err)


class KernelRepliesTest(unittest.TestCase):
    """The runner's reading of a kernel's reply pipe (parent/kernel_handle.py)."""

    def test_a_reply_says_whether_it_was_alone_in_the_pipe(self):
        kernel = Kernel()
        kernel.rep_r, w = os.pipe()
        self.addCleanup(os.close, kernel.rep_r)
        self.addCleanup(os.close, w)
        os.set_blocking(kernel.rep_r, False)
        kernel.rep_buf, kernel.rep_skip = bytearray(), False
        os.write(w, b'{"id": "a"}\n')
        self.assertEqual((kernel.read_replies(), kernel.first_alone), ([{'id': 'a'}], True))
        for ahead in (b'junk\n', b'[1]\n', b'{"id": "x"}\n'):
            os.write(w, ahead + b'{"id": "b"}\n')
            replies = kernel.read_replies()
            self.assertEqual((replies[-1], kernel.first_alone and len(replies) == 1), ({'id': 'b'}, False), ahead)
        os.write(w, b'{"id": ')  # the rest comes in a later read: not alone
        self.assertEqual(kernel.read_replies(), [])
        os.write(w, b'"c"}\n')
        self.assertEqual((kernel.read_replies(), kernel.first_alone), ([{'id': 'c'}], False))
        os.write(w, b'{"id": "d"}\n')
        self.assertEqual((kernel.read_replies(), kernel.first_alone), ([{'id': 'd'}], True))


if __name__ == '__main__':
    unittest.main()
