"""TypeScript and JavaScript in the Deno host, bash in the bash shell: the long-lived
processes other than the Python kernel, spoken to the same way (kernel_execs.py). Part
of the Worker (worker.py)."""
import os

from .outcomes import BASH_BACKGROUND, BASH_EXITED, BASH_LOST, BEYOND_HOST, DENO_LOST, with_lost
from .output import Discard
from .settings import SEPARATED, WORKSPACE
from .sweeper import process_table


class HostExecs:
    """The Worker's executions in the Deno host and the bash shell."""

    def _exec_deno(self, job, output):
        """TypeScript and JavaScript in the Deno host, in a worker with this execution's
        permissions. Executions asking for more than the host may grant run as a process."""
        req = job.req
        host = self.deno
        if req['reset'] and host.alive:
            self._lose_kernel(Discard(), host)
        if host.ceiling is None:
            host.ceiling = req['denoFlags']  # outside a container: the first execution's serve
        lost = self._ended_between(host)
        problem = self._start_deno()
        if problem:
            return with_lost({'notice': problem}, lost)
        host.used = True
        outcome = self._kernel_ready(job, host)
        if outcome is not None:
            return with_lost(outcome, lost)
        request = {'op': 'exec', 'id': job.id, 'language': req['language'], 'code': req['code'],
                   'env': self._exec_env(job), 'flags': req['denoFlags'], 'cwd': WORKSPACE}
        host.ran = True
        outcome = self._kernel_exec(job, output, host, ' ' + DENO_LOST, request)
        refused = outcome.pop('refused', None)
        if refused is None:
            return with_lost(outcome, lost)
        outcome = self._exec_process(job, output)
        outcome['notice'] = ' '.join(n for n in (BEYOND_HOST % refused, outcome.get('notice')) if n)
        return with_lost(outcome, lost)

    def _exec_bash(self, job, output):
        """bash in the long-lived shell."""
        req = job.req
        shell = self.bash
        if req['reset'] and shell.alive:
            self._lose_kernel(Discard(), shell)
        lost = self._ended_between(shell)
        problem = self._start_host(shell)
        if problem:
            return with_lost({'notice': problem}, lost)
        outcome = self._kernel_ready(job, shell)
        if outcome is not None:
            return with_lost(outcome, lost)
        try:
            script = shell.write_script(req['code'])
        except OSError as exc:
            return with_lost({'notice': 'The script could not be written to /tmp: %s.' % exc.strerror}, lost)
        request = {'id': job.id, 'env': self._exec_env(job), 'cwd': WORKSPACE, 'script': script}
        shell.ran = True
        outcome = self._kernel_exec(job, output, shell, ' ' + BASH_LOST, request)
        if outcome.get('restarted') and not outcome.get('timedOut') and isinstance(outcome.get('exitCode'), int):
            # The script ended the shell itself (`exit`, `set -e`): that is its exit code.
            outcome.update(killed=False, notice=BASH_EXITED)
        elif shell.alive and SEPARATED and self._runs_in_session(shell.proc.pid):
            # What it left running ends with it, as it always has; a fork bomb outruns
            # killing one process at a time, so the shell's whole group goes.
            self._lose_kernel(output, shell)
            outcome['restarted'] = True
            outcome['notice'] = ' '.join(n for n in (outcome.get('notice'), BASH_BACKGROUND) if n)
        return with_lost(outcome, lost)

    def _runs_in_session(self, session):
        """Whether a process of the sandbox user other than the runner's children is in `session`."""
        if frozenset(name for name in os.listdir('/proc') if name.isdigit()) == self.sweeper.clean:
            return False
        return any(s == session for _, s in process_table())
