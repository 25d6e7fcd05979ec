"""Python in the kernel, and what every long-lived process (the Python kernel, the Deno
host, the bash shell) goes through: booting until ready, one request and its checked
reply, losing it on a timeout, cancel or death, and saying so when it ended between
executions. Preloads, too. Part of the Worker (worker.py)."""
import time

from .kernel_handle import Kernel
from .narrowing import NarrowingError
from .outcomes import LOST_STATE, PYTHON_LOST, bounded, exec_outcome_of, hint_for, ms, stop_notice, with_lost
from .output import DiagSink, Discard, discard_pending, read_available, read_pending
from .procs import describe_status
from .settings import (
    DRAIN_GRACE, FIGURE_DIR, KERNEL_BOOT_SECONDS, NARROWING_FAILED, PRELOAD_SECONDS, SEPARATE_KERNEL, WORKSPACE,
    diag,
)


class KernelExecs:
    """The Worker's Python executions and preloads, and its handling of every long-lived process."""

    def _kernel_ready(self, job, kernel=None):
        """Waits for a kernel (by default the persistent one) to finish booting. Returns
        None when it is ready, else an outcome for the job (cancelled, or the kernel could
        not start)."""
        persistent = kernel is None
        kernel = kernel or self.kernel
        if persistent and not kernel.alive:
            problem = self._start_kernel()
            if problem:
                return {'notice': problem}
        if kernel.ready:
            return None
        deadline = time.monotonic() + KERNEL_BOOT_SECONDS
        reason, _ = self._pump(job, DiagSink(), kernel.streams(), deadline, kernel=kernel,
                               accept=lambda reply: reply.get('ready') is True)
        if reason == 'exited':
            try:
                kernel.on_ready()
            except OSError as exc:
                reason = 'died'
                diag('%s: %s' % (kernel.label, exc))
            else:
                kernel.ready = True
                return None
        if reason == 'cancel':
            return {'notice': 'Cancelled while the %s was starting.' % kernel.label}
        status = self._lose_kernel(DiagSink(), kernel)
        why = 'it did not become ready in %d s' % KERNEL_BOOT_SECONDS if reason == 'timeout' else describe_status(status)
        if kernel.preloaded:
            # A preloaded module may be what kills it: the next start goes without them.
            why += '; preloaded modules (%s) will not be imported again' % ', '.join(kernel.preloaded)
            kernel.preloaded = []
        return {'restarted': persistent, 'notice': 'The %s failed to start (%s).' % (kernel.label, why)}

    def _lose_kernel(self, output, kernel=None):
        """Kills a kernel (and whatever it started), keeps its last output, forgets it."""
        kernel = kernel or self.kernel
        status = kernel.kill()
        self._drain(output, kernel.streams(), DRAIN_GRACE)
        kernel.close()
        kernel.ran = False
        return status

    def _exec_python(self, job, output):
        if job.req.get('fs'):
            return self._exec_python_narrowed(job, output)
        if job.req['reset'] and self.kernel.alive:
            self._lose_kernel(Discard())
            self.kernel_lost = None
        lost = self._ended_between(self.kernel, self.kernel_lost)
        self.kernel_lost = None
        outcome = self._kernel_ready(job)
        if outcome is None:
            self.kernel.ran = True
            outcome = self._kernel_exec(job, output, self.kernel, ' ' + PYTHON_LOST)
        return with_lost(outcome, lost)

    def _ended_between(self, kernel, known=None):
        """When `kernel` (the Python kernel, the Deno host, the bash shell), after running
        code, ended since the last execution (user code left running called exit, it was
        killed while idle), or `known` says how it ended: a notice that its state is gone.
        A dead one is cleared away, so that this execution runs in a new one."""
        lost = known
        if kernel.alive and kernel.proc.poll() is not None:
            ran = kernel.ran
            status = self._lose_kernel(Discard(), kernel)
            if ran:
                lost = describe_status(status)
        if lost is None:
            return None
        return 'The %s had ended since the last execution (%s) and was started again. %s' % (
            kernel.label, lost, LOST_STATE[kernel.label])

    def _exec_python_narrowed(self, job, output):
        """Narrowed Python runs in a one-shot kernel started through the lockdown: the
        persistent kernel's namespaces cannot be narrowed after the fact."""
        kernel = Kernel(job.req['fs'])
        try:
            kernel.start()
        except NarrowingError as exc:
            return {'notice': NARROWING_FAILED % exc}
        except OSError as exc:
            return {'notice': 'The Python interpreter for this narrowed execution could not be started: %s%s'
                    % (exc, hint_for(exc))}
        try:
            outcome = self._kernel_ready(job, kernel)
            if outcome is None:
                outcome = self._kernel_exec(job, output, kernel, '')
            outcome['restarted'] = False  # the persistent kernel was not touched
            outcome['notice'] = ' '.join(n for n in (SEPARATE_KERNEL, outcome.get('notice')) if n)
            return outcome
        finally:
            if kernel.alive:
                self._lose_kernel(Discard(), kernel)

    def _kernel_exec(self, job, output, kernel, lost, request=None):
        """Runs the job's code in a ready kernel (or the Deno host, with its `request`).
        On a timeout, cancel or death the kernel is killed and `lost` ends the notice."""
        discard_pending(kernel.streams())  # output from between executions
        kernel.discard_replies()  # and anything written to the reply pipe meanwhile
        started = time.monotonic()
        request = request or {'op': 'exec', 'id': job.id, 'code': job.req['code'], 'env': self._exec_env(job),
                              'cwd': WORKSPACE, 'figdir': FIGURE_DIR}
        try:
            kernel.send(request)
        except OSError:
            reason, reply = 'died', None
        else:
            deadline = started + job.req['timeoutMs'] / 1000
            reason, reply = self._pump(job, output, kernel.streams(), deadline, kernel=kernel,
                                       accept=lambda reply: reply.get('id') == job.id)
        if reason == 'exited':
            # Everything the kernel wrote before replying is already in the pipes; _pump
            # read once from the streams that had some: read on from those only. Unless
            # the poll came before the reply was written (last_ready None): then one more
            # poll, now, finds the streams that still hold output.
            streams = kernel.streams()
            if self.last_ready is None:
                read_pending(streams, output)
            else:
                read_available({fd: streams[fd] for fd in self.last_ready if fd in streams}, output)
            outcome = exec_outcome_of(reply)
            outcome['durationMs'] = ms(time.monotonic() - started)
            return outcome
        status = self._lose_kernel(output, kernel)
        outcome = {'durationMs': ms(time.monotonic() - started), 'exitCode': None, 'killed': True,
                   'restarted': True, 'result': None}
        if reason == 'died':
            if status >= 0:
                outcome['exitCode'] = status
            outcome['notice'] = 'The %s died (%s).%s' % (kernel.label, describe_status(status), lost)
        else:
            outcome.update(timedOut=reason == 'timeout', notice=stop_notice(reason, job.req['timeoutMs']) + lost)
        return outcome

    def _run_preload(self, job):
        modules = [m for m in job.req.get('modules') or [] if isinstance(m, str)]
        started = time.monotonic()
        event = {'type': 'preloaded', 'id': job.id, 'modules': modules}
        error = None
        sink = None
        was_ready = self.kernel.alive and self.kernel.ready
        outcome = self._kernel_ready(job)
        if outcome is not None:
            error = outcome['notice']
        else:
            kernel = self.kernel
            try:
                kernel.discard_replies()
                kernel.send({'op': 'preload', 'modules': modules})
                # With no modules (the gateway's warm-up of a frozen sandbox) anything the
                # kernel writes is what user code left running prints between executions:
                # dropped, as the next execution drops it, not copied into the logs.
                sink = DiagSink() if modules else Discard()
                reason, reply = self._pump(job, sink, kernel.streams(), started + PRELOAD_SECONDS, kernel=kernel,
                                           accept=lambda reply: 'loaded' in reply)
            except OSError:
                reason, reply = 'died', None
            if reason == 'exited':
                error = bounded(reply.get('error'), 2000)
                loaded = reply.get('loaded')
                for name in loaded if isinstance(loaded, list) else []:
                    if name in modules and name not in kernel.preloaded:
                        kernel.preloaded.append(name)
            else:
                ran = kernel.ran
                status = self._lose_kernel(DiagSink())
                if ran:
                    self.kernel_lost = describe_status(status) if reason == 'died' else 'its preload ' + (
                        'was cancelled' if reason == 'cancel' else 'timed out')
                error = {'cancel': 'cancelled', 'timeout': 'timed out after %d s' % PRELOAD_SECONDS}.get(
                    reason, 'the Python kernel died (%s)' % describe_status(status))
                error += '; the kernel was restarted'
                self._start_kernel()
        event['ms'] = ms(time.monotonic() - started)
        if error:
            event['error'] = error
        # Nothing imported, no kernel started, nothing read and dropped: nothing to trim.
        job.quiet = not modules and was_ready and not error and isinstance(sink, Discard) and not sink.bytes
        self.emitter.emit(event)
