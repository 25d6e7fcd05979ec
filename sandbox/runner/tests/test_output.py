"""An execution's output (parent/output.py, parent/pump.py): streamed while it runs, from
every writer, cut at the request's limit while the pipes keep being read."""
import unittest

from harness import RunnerCase


class OutputTest(RunnerCase):
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


if __name__ == '__main__':
    unittest.main()
