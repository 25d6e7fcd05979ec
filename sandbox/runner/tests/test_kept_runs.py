"""Kept executions (parent/gateway_channel.py): an execution sent with `keep: true` has its
output and `done` recorded, so a gateway that was away while it ran (or finished) claims
them whole, in order; `release` forgets them; other executions are not recorded."""
import time
import unittest

from harness import RunnerCase


class KeptRunsTest(RunnerCase):
    def claim(self, target, req_id='k1'):
        """The `claimed` answer and the events replayed after it, up to a `done` (or none)."""
        self.r.send({'op': 'claim', 'id': req_id, 'target': target})
        claimed = self.r.next(lambda e: e['type'] == 'claimed' and e['id'] == req_id)
        return claimed

    def test_a_finished_kept_run_is_replayed_whole_after_claim(self):
        exec_id = self.r.start_exec('print("one")\nprint("two")\n6 * 7', keep=True)
        out, _, done = self.r.collect(exec_id)  # seen live, as a gateway that stayed would
        self.assertEqual(out, 'one\ntwo\n')
        claimed = self.claim(exec_id)
        self.assertEqual((claimed['target'], claimed['state']), (exec_id, 'done'))
        out2, _, done2 = self.r.collect(exec_id)
        self.assertEqual(out2, 'one\ntwo\n')
        self.assertEqual(done2['result'], '42')
        self.assertEqual(done2, done)
        # Released: gone.
        self.r.send({'op': 'release', 'id': 'r1', 'target': exec_id})
        self.assertEqual(self.claim(exec_id, 'k2')['state'], 'unknown')

    def test_a_running_kept_run_replays_what_came_and_then_goes_on_live(self):
        code = 'import time, sys\nprint("before", flush=True)\ntime.sleep(1.0)\nprint("after")'
        exec_id = self.r.start_exec(code, keep=True)
        self.r.next(lambda e: e.get('id') == exec_id and e['type'] == 'stdout')
        claimed = self.claim(exec_id)
        self.assertEqual(claimed['state'], 'pending')
        out, _, done = self.r.collect(exec_id)
        self.assertEqual(out, 'before\nafter\n')
        self.assertEqual(done['exitCode'], 0)

    def test_a_kept_run_can_be_cancelled_by_its_id(self):
        exec_id = self.r.start_exec('import time\ntime.sleep(30)', keep=True)
        time.sleep(0.5)
        self.assertEqual(self.claim(exec_id)['state'], 'pending')
        self.r.send({'op': 'cancel', 'id': 'c1', 'target': exec_id})
        _, _, done = self.r.collect(exec_id, timeout=10)
        self.assertTrue(done['killed'])

    def test_ping_lists_the_kept_runs_in_order(self):
        self.r.send({'op': 'ping', 'id': 'p0'})
        self.assertEqual(self.r.next(lambda e: e['type'] == 'pong')['kept'], [])
        first = self.r.start_exec('print(1)', keep=True)
        self.r.collect(first)
        second = self.r.start_exec('import time\ntime.sleep(1)', language='python', keep=True)
        self.r.send({'op': 'ping', 'id': 'p1'})
        kept = self.r.next(lambda e: e['type'] == 'pong' and e['id'] == 'p1')['kept']
        self.assertEqual(kept, [{'id': first, 'language': 'python', 'done': True}, {'id': second, 'language': 'python', 'done': False}])
        self.r.collect(second)

    def test_ping_lists_the_executions_running_or_queued_kept_or_not(self):
        self.r.send({'op': 'ping', 'id': 'p0'})
        self.assertEqual(self.r.next(lambda e: e['type'] == 'pong')['execs'], [])
        running = self.r.start_exec('import time\ntime.sleep(30)')
        queued = self.r.start_exec('print(1)', keep=True)
        time.sleep(0.3)
        self.r.send({'op': 'ping', 'id': 'p1'})
        self.assertEqual(self.r.next(lambda e: e['type'] == 'pong' and e['id'] == 'p1')['execs'], [running, queued])
        # What a gateway that adopts the sandbox does with one whose caller is gone.
        self.r.send({'op': 'cancel', 'id': 'c1', 'target': running})
        self.assertTrue(self.r.collect(running, timeout=10)[2]['killed'])
        self.r.collect(queued)
        self.r.send({'op': 'ping', 'id': 'p2'})
        self.assertEqual(self.r.next(lambda e: e['type'] == 'pong' and e['id'] == 'p2')['execs'], [])

    def test_runs_not_kept_are_not_recorded(self):
        _, _, done = self.r.run('print(1)')
        self.assertEqual(self.claim('e1')['state'], 'unknown')
        self.assertEqual(self.claim(None, 'k3')['state'], 'unknown')

    def test_records_are_bounded(self):
        ids = [self.r.start_exec('%d' % i, keep=True) for i in range(20)]
        for i in ids:
            self.r.collect(i)
        states = [self.claim(i, 'q%s' % i)['state'] for i in ids]
        self.assertEqual(states[:4], ['unknown'] * 4)
        self.assertEqual(states[4:], ['done'] * 16)


if __name__ == '__main__':
    unittest.main()
