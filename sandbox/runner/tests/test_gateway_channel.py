"""The runner's channel to the gateway (parent/main.py, parent/gateway_channel.py): `ready`
first, pings answered at once (with Deno's version), bad lines logged and survived,
stdin's end ending everything."""
import os
import shutil
import sys
import tempfile
import time
import unittest

from harness import HAS_DENO, Runner, RunnerCase, pid_alive


class GatewayChannelTest(RunnerCase):
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


if __name__ == '__main__':
    unittest.main()


class SocketChannelTest(unittest.TestCase):
    """The channel on a cluster: a socket in a root-only folder; a new gateway's connection
    replaces the one before, and events go to whichever is connected."""

    def test_newest_connection_wins(self):
        import json
        import socket
        import threading
        sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        from sandgate_runner.parent.gateway_channel import Emitter, SocketChannel
        folder = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, folder, True)
        path = os.path.join(folder, 'run', 'runner.sock')
        emitter = Emitter(None)
        channel = SocketChannel(path, emitter)
        channel.bind()
        self.assertEqual(os.stat(os.path.dirname(path)).st_mode & 0o777, 0o700)
        self.assertEqual(os.stat(path).st_mode & 0o777, 0o600)
        got = []

        def serve():
            for line in channel.lines():
                req = json.loads(line)
                got.append(req['n'])
                emitter.emit({'type': 'pong', 'id': req['n']})
        threading.Thread(target=serve, daemon=True).start()
        emitter.emit({'type': 'dropped'})  # nobody connected: dropped, no error

        def connect():
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.connect(path)
            s.settimeout(5)
            return s, s.makefile('rb')
        a, a_in = connect()
        a.sendall(b'{"n": 1}\n')
        self.assertEqual(json.loads(a_in.readline())['id'], 1)
        b, b_in = connect()
        time.sleep(0.2)
        # The first gateway's connection is closed for it; the second's is heard.
        self.assertEqual(a_in.readline(), b'')
        b.sendall(b'{"n": 2}\n')
        self.assertEqual(json.loads(b_in.readline()), {'type': 'pong', 'id': 2})
        self.assertEqual(got, [1, 2])
        b.close()
        a.close()
