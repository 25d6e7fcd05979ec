"""The bridge (parent/bridge_server.py, user/bridge_client.py): calls from code in the
sandbox to the gateway, from Python, bash and Deno, taken only from the running
execution and bounded."""
import json
import os
import socket
import unittest

from harness import HAS_DENO, USER_DIR, RunnerCase


class BridgeTest(RunnerCase):
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
                'try:\n    call("tools/call", {"name": "fail"})\nexcept BridgeError as e:\n    print("error", e)\n' % USER_DIR)
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
            'import sys\nsys.path.insert(0, %r)\nfrom bridge_client import call\ncall("slow")' % USER_DIR, timeout_ms=500)
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


if __name__ == '__main__':
    unittest.main()
