"""bash in the long-lived shell (parent/bash_shell.py, parent/host_execs.py): its output,
exit code and environment, what it keeps between executions and what it does not, and
what ends with it."""
import os
import time
import unittest

from harness import RunnerCase, pid_alive


class BashShellTest(RunnerCase):
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


if __name__ == '__main__':
    unittest.main()
