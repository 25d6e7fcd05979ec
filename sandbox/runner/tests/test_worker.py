"""The worker (parent/worker.py and its parts): executions one at a time in arrival order,
timeouts and cancels that kill and restart, no leaks over many executions, the round
trip's latency, and freed heap handed back once idle after a job."""
import os
import shutil
import sys
import tempfile
import time
import unittest

from harness import HAS_DENO, PACKAGE, ROOT, Runner, RunnerCase, pid_alive, threading_count


class WorkerTest(RunnerCase):
    def test_executions_are_serialized_in_order(self):
        ids = [self.r.start_exec('import time\ntime.sleep(0.05)\n%d' % i) for i in range(5)]
        dones = [self.r.next(lambda e: e['type'] == 'done') for _ in ids]
        self.assertEqual([d['id'] for d in dones], ids)
        self.assertEqual([d['result'] for d in dones], [str(i) for i in range(5)])

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
import sandgate_runner.parent.settings as settings
trim = settings.malloc_trim
def counted():
    with open(os.environ['TRIM_LOG'], 'a') as f:
        f.write('trim\\n')
    trim()
settings.malloc_trim = counted
import sandgate_runner.parent.main as main
main.main()
""" % (ROOT, PACKAGE)


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


if __name__ == '__main__':
    unittest.main()
