"""TypeScript and JavaScript in the Deno host (parent/deno_host.py, parent/host_execs.py):
results, permissions, top-level names kept per permission set, timeouts, and a channel
that takes only the host."""
import json
import os
import socket
import threading
import time
import unittest

from harness import HAS_DENO, Runner, RunnerCase


class DenoHostTest(RunnerCase):
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


if __name__ == '__main__':
    unittest.main()
