"""Executions that run as a process of their own (a process group): narrowed bash,
TypeScript and JavaScript, and TypeScript or JavaScript whose permissions go beyond
the Deno host's. Part of the Worker (worker.py)."""
import _signal
import os
import time

from .narrowing import Helper, NarrowingError, spawn
from .outcomes import hint_for, ms, stop_notice
from .procs import end_group, kill_group, set_nonblocking, signal_name
from .script_files import write_in_place
from .settings import BASH, DENO, DRAIN_GRACE, NARROWING_FAILED, STATE_DIR, diag


class ProcessExecs:
    """The Worker's executions that run as a process of their own."""

    def _exec_process(self, job, output):
        """One process (group) per execution: narrowed ones and those the Deno host may not run."""
        req = job.req
        ext = {'bash': 'sh', 'typescript': 'ts', 'javascript': 'js'}[req['language']]
        # One file per language, written over in place (see write_in_place).
        script = os.path.join(STATE_DIR, 'exec.%s' % ext)
        if req['language'] == 'bash':
            argv = [BASH, script]
        else:
            argv = [DENO, 'run', '--no-prompt', '--quiet'] + req['denoFlags'] + [script]
        try:
            write_in_place(script, req['code'])
        except OSError as exc:
            return {'notice': 'The script could not be written to /tmp: %s.' % exc.strerror}
        try:
            return self._run_process(job, output, argv)
        except NarrowingError as exc:
            return {'notice': NARROWING_FAILED % exc}
        except OSError as exc:
            return {'notice': 'Could not start %s: %s%s' % (os.path.basename(argv[0]), exc, hint_for(exc))}

    def _run_process(self, job, output, argv):
        started = time.monotonic()
        if self.stopping:
            return {'notice': 'The runner is shutting down.'}
        proc = spawn(argv, self._exec_env(job), fs=job.req.get('fs'), spares=self.spares)
        self.running_pgid = proc.pid
        if job.req.get('fs') and not self.spares:
            # Narrowed executions tend to come in runs: a helper for the next one starts
            # now (the one just used is this execution's process), so it can skip that.
            try:
                self.spares.append(Helper())
            except OSError as exc:
                diag('cannot start a lockdown helper: %s' % exc)
        try:
            streams = {proc.stdout: 'stdout', proc.stderr: 'stderr'}
            set_nonblocking(*streams)
            deadline = started + job.req['timeoutMs'] / 1000
            reason, _ = self._pump(job, output, streams, deadline, proc=proc)
            # Always kill the group: background children do not outlive their execution.
            kill_group(proc.pid)
            status = proc.wait()
            duration = time.monotonic() - started
            end_group(proc)  # again, until no member is left (fork bombs)
            self._drain(output, streams, DRAIN_GRACE)
        finally:
            self.running_pgid = None
            proc.close()
        outcome = {'durationMs': ms(duration)}
        if reason in ('timeout', 'cancel'):
            outcome.update(exitCode=None, killed=True, timedOut=reason == 'timeout',
                           notice=stop_notice(reason, job.req['timeoutMs']))
        elif status < 0:
            outcome.update(exitCode=None, killed=True, notice='The process was killed by %s%s.' % (
                signal_name(-status), ' (out of memory?)' if -status == _signal.SIGKILL else ''))
        else:
            outcome['exitCode'] = status
        return outcome
