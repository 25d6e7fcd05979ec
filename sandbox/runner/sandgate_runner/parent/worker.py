"""The worker thread: runs executions and preloads one at a time, in arrival order, and
answers each with one `done`. It keeps the queue, picks the process for each execution
(the persistent kernel, a one-shot kernel for narrowed Python, the Deno host for
TypeScript and JavaScript, the bash shell for bash, a fresh process for narrowed ones),
and reports file changes. The Worker is put together from its parts, each in a module
of its own and all sharing its state: Pump (pump.py: waiting on a process, timeouts,
cancels, output), KernelExecs (kernel_execs.py: Python, preloads, every long-lived
process), HostExecs (host_execs.py: the Deno host, the bash shell) and ProcessExecs
(process_execs.py: a process per execution)."""
from collections import deque
import os
import threading
import time

from .bash_shell import BashShell
from .deno_host import DenoHost, ceiling_from_env
from .host_execs import HostExecs
from .jobs import Job, parse_exec
from .kernel_execs import KernelExecs
from .kernel_handle import Kernel
from .narrowing import make_deno_dirs
from .outcomes import SEPARATE_DENO, done_event, hint_for
from .output import Output, drain_fd
from .procs import kill_group, set_nonblocking
from .process_execs import ProcessExecs
from .pump import Pump
from .script_files import reserve_files
from .settings import (
    BRIDGE_PATH, MAX_FILE_CHANGES, SEPARATED, SPARE_IDLE_SECONDS, STATE_DIR, TRIM_IDLE_SECONDS, WORKSPACE, diag,
    malloc_trim,
)
from .sweeper import Sweeper
from .workspace_scan import file_changes, scan_notice, snapshot


class Worker(Pump, KernelExecs, HostExecs, ProcessExecs):
    """Runs jobs one at a time; cancel() may be called from any thread."""

    def __init__(self, emitter, bridge, relay=None):
        self.emitter = emitter
        self.bridge = bridge
        self.relay = relay
        self.cond = threading.Condition()
        self.jobs = deque()
        self.current = None
        self.stopping = False
        self.kernel = Kernel()
        # How the persistent kernel ended after it had run code, when nothing has said so
        # yet (it died between executions and a preload started it again): the next
        # Python execution says its variables are gone.
        self.kernel_lost = None
        self.deno = DenoHost(ceiling_from_env())
        self.bash = BashShell(STATE_DIR)
        self.running_pgid = None  # the exec process group, for shutdown
        self.spares = []          # a lockdown helper started ahead for the next narrowed execution
        self.trim_at = None       # when to hand freed heap back, if still idle then
        # The workspace scan that ended the previous execution: the next one may start
        # from it when the gateway says nothing outside the sandbox wrote in between.
        self.last_scan = None
        self.wake_r, self.wake_w = os.pipe()
        set_nonblocking(self.wake_r, self.wake_w)
        self.woken = False        # something was written to wake_w (saves a read per execution)
        self.last_ready = ()      # streams _pump saw readable in its last poll
        self.sweeper = Sweeper()

    # --- any thread

    def submit(self, kind, req):
        job_id = req.get('id')
        if not isinstance(job_id, str) or not job_id or any(c.isspace() for c in job_id):
            self.emitter.log('error', '%s request without a string "id" (without blanks)' % kind)
            return
        with self.cond:
            if (self.current and self.current.id == job_id) or any(j.id == job_id for j in self.jobs):
                self.emitter.log('error', 'duplicate request id %r ignored' % job_id)
                return
        if kind == 'exec':
            problem = parse_exec(req)
            if problem:
                self.emitter.emit(done_event(job_id, notice='invalid exec request: ' + problem))
                return
        with self.cond:
            self.jobs.append(Job(kind, req))
            self.cond.notify()

    def execs(self):
        """The ids of the executions running or queued, in order: a gateway that adopts the
        sandbox cancels those whose caller is gone (every one not kept)."""
        with self.cond:
            jobs = ([self.current] if self.current is not None else []) + list(self.jobs)
            return [j.id for j in jobs if j.kind == 'exec']

    def cancel(self, target):
        with self.cond:
            if self.current is not None and self.current.id == target:
                self.current.cancelled = True
                self._wake()
                return
            job = next((j for j in self.jobs if j.id == target), None)
            if job is None:
                self.emitter.log('warn', 'cancel: no queued or running request %r' % (target,))
                return
            self.jobs.remove(job)
        if job.kind == 'exec':
            self.emitter.emit(done_event(job.id, notice='Cancelled before it started.'))
        else:
            self.emitter.emit({'type': 'preloaded', 'id': job.id, 'modules': job.req.get('modules') or [],
                               'ms': 0, 'error': 'cancelled before it started'})

    def shutdown(self):
        """Kills whatever runs (stdin closed: nobody is listening any more)."""
        with self.cond:
            self.stopping = True
            self.jobs.clear()
            self.cond.notify()
        if self.running_pgid:
            kill_group(self.running_pgid)
        for helper in list(self.spares):
            kill_group(helper.proc.pid)
        for proc in (self.kernel.proc, self.deno.proc, self.bash.proc):
            if proc is not None:
                kill_group(proc.pid)

    def _wake(self):
        self.woken = True
        try:
            os.write(self.wake_w, b'x')
        except BlockingIOError:
            pass

    # --- worker thread

    def run(self):
        try:
            reserve_files(STATE_DIR)
            make_deno_dirs()
        except OSError as exc:
            diag('cannot make the script files or Deno\'s cache folder: %s' % exc)
        self._start_kernel()
        if self.deno.ceiling is not None and os.environ.get('SANDGATE_DENO_HOST') != 'first-use':
            self._start_deno()
        self.trim_at = time.monotonic() + TRIM_IDLE_SECONDS  # start-up garbage (compiling this file)
        while True:
            with self.cond:
                while not self.jobs and not self.stopping:
                    timeout = self._idle_duties(time.monotonic())
                    self.cond.wait(timeout)
                if self.stopping:
                    return
                job = self.current = self.jobs.popleft()
            try:
                if job.kind == 'exec':
                    self._run_exec(job)
                else:
                    self._run_preload(job)
            except Exception as exc:
                import traceback
                diag(traceback.format_exc())
                self.emitter.log('error', 'runner error in %s %s: %r' % (job.kind, job.id, exc))
                if job.kind == 'exec' and not job.finished:
                    self.emitter.emit(done_event(job.id, notice='Internal runner error: %r' % (exc,)))
            finally:
                with self.cond:
                    self.current = None
                # A warm-up (an empty preload: the gateway's round trip through a frozen
                # sandbox) that found all well leaves no garbage; arming the trim for it
                # would trim at every thaw and fault the trimmed pages back in at the next.
                if not job.quiet:
                    self.trim_at = time.monotonic() + TRIM_IDLE_SECONDS

    def _idle_duties(self, now):
        """While idle: hands freed heap back once idle for a while after a job, drops a
        spare lockdown helper unused for long. Returns how long to wait (None: forever)."""
        waits = []
        if self.trim_at is not None:
            if now >= self.trim_at:
                self.trim_at = None
                malloc_trim()
            else:
                waits.append(self.trim_at - now)
        if self.spares:
            idle = now - self.spares[0].since
            if idle >= SPARE_IDLE_SECONDS:
                self.spares.pop().discard()  # give its memory back
            else:
                waits.append(SPARE_IDLE_SECONDS - idle)
        return min(waits) if waits else None

    def _kept_sessions(self):
        keep = {helper.proc.pid for helper in self.spares}
        # Not the bash shell's: what a bash script left in the background ends with it,
        # as it always has (the shell itself is the runner's child, never a stray).
        for kernel in (self.kernel, self.deno):
            if kernel.alive:
                keep.add(kernel.proc.pid)
        return keep

    def _start_deno(self):
        return self._start_host(self.deno)

    def _start_host(self, host):
        """Starts the Deno host or the bash shell if it is not running; returns a problem or None."""
        if host.alive or self.stopping:
            return None
        try:
            host.start()
            return None
        except OSError as exc:
            diag('cannot start the %s: %s' % (host.label, exc))
            return 'The %s could not be started: %s%s' % (host.label, exc, hint_for(exc))

    def _start_kernel(self):
        """Starts the kernel if none runs; a failure is reported by the next Python exec."""
        if self.kernel.alive or self.stopping:
            return None
        try:
            self.kernel.start()
            return None
        except OSError as exc:
            diag('cannot start the Python kernel: %s' % exc)
            return 'The Python kernel could not be started: %s%s' % (exc, hint_for(exc))

    # --- executions

    def _run_exec(self, job):
        req = job.req
        if self.woken:  # a cancel of an earlier job may have left a byte
            self.woken = False
            drain_fd(self.wake_r)
        output = Output(self.emitter, job.id, req['outputLimit'])
        if req.get('reuseSnapshot') and self.last_scan is not None:
            before = self.last_scan
        else:
            before = snapshot(WORKSPACE)
        self.bridge.open_exec(job.id)
        if self.relay is not None:
            self.relay.open_exec(job.id)
        try:
            if req['language'] == 'python':
                outcome = self._exec_python(job, output)
            elif req.get('fs'):
                outcome = self._exec_process(job, output)
                if req['language'] != 'bash':
                    outcome['notice'] = ' '.join(n for n in (SEPARATE_DENO, outcome.get('notice')) if n)
            elif req['language'] == 'bash':
                outcome = self._exec_bash(job, output)
            else:
                outcome = self._exec_deno(job, output)
        finally:
            self.bridge.close_exec(job.id)
            if self.relay is not None:
                self.relay.close_exec(job.id)
        # Whatever the execution left running in the background ends with it.
        if SEPARATED:
            self.sweeper.sweep(self._kept_sessions())
        output.finish()
        after = snapshot(WORKSPACE)
        self.last_scan = after
        notices = [outcome.pop('notice', None), scan_notice(before, after)]
        changes = file_changes(before.files, after.files, before.partial or after.partial)
        if len(changes) > MAX_FILE_CHANGES:
            notices.append('%d more file changes are not listed.' % (len(changes) - MAX_FILE_CHANGES))
            changes = changes[:MAX_FILE_CHANGES]
        event = done_event(job.id, truncated=output.truncated(), files=changes,
                           notice=' '.join(n for n in notices if n) or None, **outcome)
        job.finished = True
        self.emitter.emit(event)
        # A fresh kernel or host boots while the gateway reads the result.
        if req['language'] == 'python' and not self.kernel.alive:
            self._start_kernel()
        elif req['language'] in ('typescript', 'javascript') and self.deno.used and not self.deno.alive:
            self._start_deno()
        elif req['language'] == 'bash' and not req.get('fs') and not self.bash.alive:
            self._start_host(self.bash)

    def _exec_env(self, job):
        env = dict(job.req['env'])
        env['SANDGATE_BRIDGE'] = BRIDGE_PATH
        env['SANDGATE_EXEC_ID'] = job.id
        return env
