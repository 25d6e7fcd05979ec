"""The worker thread: runs executions and preloads one at a time, in arrival order, and
answers each with one `done`. It validates requests, picks the process (the persistent
kernel, a one-shot kernel for narrowed Python, the Deno host for TypeScript and
JavaScript, the bash shell for bash, a fresh process for narrowed ones), enforces
timeouts, cancels and output limits, and reports file changes."""
import _signal
from collections import deque
import os
import selectors
import threading
import time

from runner_base import (
    BASH, BRIDGE_PATH, DEFAULT_OUTPUT_LIMIT, DEFAULT_TIMEOUT_MS, DENO, DRAIN_GRACE, DRAIN_MAX, FIGURE_DIR,
    KERNEL_BOOT_SECONDS, LANGUAGES, MAX_FILE_CHANGES, MAX_RESULT_CHARS, NARROWING_FAILED, PRELOAD_SECONDS,
    SEPARATED, SEPARATE_KERNEL, SPARE_IDLE_SECONDS, STATE_DIR, TRIM_IDLE_SECONDS, WORKSPACE, diag,
    malloc_trim,
)
from runner_hosts import BashShell, DenoHost, ceiling_from_env, reserve_files, write_in_place
from runner_files import file_changes, scan_notice, snapshot
from runner_kernel import Kernel
from runner_output import DiagSink, Discard, Output, discard_pending, drain_fd, read_available, read_into
from runner_procs import (
    Helper, NarrowingError, Sweeper, describe_status, end_group, has_exited, kill_group, make_deno_dirs,
    process_table, set_nonblocking, signal_name, spawn,
)


class Job:
    __slots__ = ('kind', 'id', 'req', 'cancelled', 'finished', 'quiet')

    def __init__(self, kind, req):
        self.kind = kind  # 'exec' | 'preload'
        self.id = req['id']
        self.req = req
        self.cancelled = False
        self.finished = False
        self.quiet = False  # a round trip that left no garbage behind (a warm-up that found all well)


def parse_exec(req):
    """Validates an exec request in place (filling defaults); returns an error or None."""
    if req.get('language') not in LANGUAGES:
        return 'unknown language %r (expected one of %s)' % (req.get('language'), ', '.join(LANGUAGES))
    if not isinstance(req.get('code'), str):
        return '"code" must be a string'
    timeout = req.setdefault('timeoutMs', DEFAULT_TIMEOUT_MS)
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout <= 0:
        return '"timeoutMs" must be a positive number'
    limit = req.setdefault('outputLimit', DEFAULT_OUTPUT_LIMIT)
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 0:
        return '"outputLimit" must be a non-negative integer'
    env = req.setdefault('env', {})
    if not isinstance(env, dict) or not all(
            isinstance(k, str) and isinstance(v, str) and k and '=' not in k and '\0' not in k + v
            for k, v in env.items()):
        return '"env" must map variable names to strings'
    if not isinstance(req.setdefault('reset', False), bool):
        return '"reset" must be a boolean'
    flags = req.setdefault('denoFlags', [])
    if not isinstance(flags, list) or not all(isinstance(f, str) and f.startswith('-') for f in flags):
        return '"denoFlags" must be a list of flags'
    fs = req.get('fs')
    if fs is not None:
        if not isinstance(fs, dict):
            return '"fs" must be {"readOnly": [...], "hidden": [...]}'
        for key in ('readOnly', 'hidden'):
            paths = fs.get(key, [])
            if not isinstance(paths, list) or not all(
                    isinstance(p, str) and p.startswith('/') and '\0' not in p for p in paths):
                return '"fs.%s" must be a list of absolute paths' % key
            if key == 'hidden' and any(os.path.normpath(p) == '/' for p in paths):
                return '"/" cannot be hidden'
        # Nothing to narrow: run as usual (and pay nothing for it).
        req['fs'] = fs if fs.get('readOnly') or fs.get('hidden') else None
    return None


class Worker:
    """Runs jobs one at a time; cancel() may be called from any thread."""

    def __init__(self, emitter, bridge):
        self.emitter = emitter
        self.bridge = bridge
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

    def _pump(self, job, output, streams, deadline, proc=None, kernel=None, accept=None):
        """Forwards output until the process ends (proc exited / kernel replied), the
        deadline passes or the job is cancelled. Returns (reason, kernel reply) with reason
        'exited', 'died' (kernel gone), 'timeout' or 'cancel'. With a kernel, only a reply
        that `accept` takes ends the wait; others are dropped."""
        # poll(2): one syscall per wait, nothing to set up or tear down (epoll costs
        # three more syscalls per execution, and syscalls are slow under gVisor).
        sel = selectors.PollSelector()
        try:
            for fd, name in streams.items():
                sel.register(fd, selectors.EVENT_READ, name)
            sel.register(self.wake_r, selectors.EVENT_READ, 'wake')
            if kernel is not None:
                sel.register(kernel.rep_r, selectors.EVENT_READ, 'reply')
            open_streams = len(streams)
            poll = 0.0005  # for proc: how often to look for its exit once its pipes closed
            while True:
                now = time.monotonic()
                output.flush_due(now)
                if job.cancelled:
                    return 'cancel', None
                if proc is not None and has_exited(proc):
                    return 'exited', None
                if kernel is not None and kernel.watch_exit and not kernel.ready and has_exited(kernel.proc):
                    # What it wrote before it died comes first.
                    replies = kernel.read_replies() or []
                    for reply in replies:
                        if accept is None or accept(reply):
                            return 'exited', reply
                    return 'died', None
                if now >= deadline:
                    return 'timeout', None
                timeout = deadline - now
                hint = output.wait_hint(now)
                if hint is not None:
                    timeout = min(timeout, hint)
                if kernel is not None and kernel.watch_exit and not kernel.ready:
                    timeout = min(timeout, 0.01)  # its death or key before ready has no fd to wait on
                if proc is not None:
                    # Its exit has no fd to wait on: look again soon, sooner once the
                    # pipes closed (it is then almost certainly exiting).
                    if open_streams == 0:
                        timeout, poll = min(timeout, poll), min(poll * 2, 0.05)
                    else:
                        timeout = min(timeout, 0.05)
                events = sel.select(timeout)
                if kernel is not None and kernel.watch_exit and not kernel.ready and not any(
                        key.data == 'reply' for key, _ in events):
                    # Its handshake (the Deno host's key) may wait on a descriptor not polled.
                    events.append((sel.get_key(kernel.rep_r), selectors.EVENT_READ))
                if kernel is not None:
                    # Streams before the reply: what the kernel wrote before replying is
                    # in the pipes by the time the reply is, so a stream that this poll
                    # does not report readable has nothing more of this execution.
                    events.sort(key=lambda event: event[0].data == 'reply')
                    self.last_ready = [key.fd for key, _ in events if key.data in ('stdout', 'stderr')]
                for key, _ in events:
                    if key.data == 'wake':
                        drain_fd(self.wake_r)
                    elif key.data == 'reply':
                        replies = kernel.read_replies()
                        if replies is None:
                            return 'died', None
                        for reply in replies:
                            if accept is None or accept(reply):
                                return 'exited', reply
                    elif not read_into(key.fd, key.data, output):
                        sel.unregister(key.fd)
                        open_streams -= 1
        finally:
            sel.close()

    def _drain(self, output, streams, grace, limit=DRAIN_MAX):
        """Reads what the streams still hold: until EOF, until nothing came for `grace`
        seconds, or for `limit` seconds at most (a live writer cannot keep us here)."""
        sel = selectors.PollSelector()
        try:
            for fd, name in streams.items():
                sel.register(fd, selectors.EVENT_READ, name)
            stop = time.monotonic() + limit
            while sel.get_map() and time.monotonic() < stop:
                events = sel.select(grace)
                if not events:
                    break
                for key, _ in events:
                    if not read_into(key.fd, key.data, output):
                        sel.unregister(key.fd)
        finally:
            sel.close()

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
            # read once from the streams that had some: read on from those only.
            streams = kernel.streams()
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


def bounded(value, limit, keep_tail=False):
    """value when it is a string of at most `limit` characters, cut to that when longer
    (keeping its end with keep_tail), None when it is not a string."""
    if not isinstance(value, str):
        return None
    if len(value) <= limit:
        return value
    return '...' + value[-limit:] if keep_tail else value[:limit] + '...'


def exec_outcome_of(reply):
    """The outcome fields of a kernel's exec reply, of the types and sizes the protocol
    allows (user code can write a reply of its own)."""
    code = reply.get('exitCode')
    if isinstance(code, bool) or not isinstance(code, int) or not -(1 << 31) <= code < 1 << 31:
        code = 1
    outcome = {'exitCode': code, 'result': bounded(reply.get('result'), MAX_RESULT_CHARS)}
    error = reply.get('error')
    if isinstance(error, dict):
        outcome['error'] = {'name': bounded(error.get('name'), 200) or 'Error',
                            'message': bounded(error.get('message'), 4096) or '',
                            'traceback': bounded(error.get('traceback'), 16384, keep_tail=True) or ''}
    figure_error = bounded(reply.get('figureError'), 500)
    notices = [bounded(reply.get('notice'), 1000)]  # the Deno host's
    if figure_error:
        notices.append('Open matplotlib figures could not be saved (%s).' % figure_error)
    if any(notices):
        outcome['notice'] = ' '.join(n for n in notices if n)
    refused = bounded(reply.get('refused'), 500)
    if refused is not None:
        outcome['refused'] = refused
    return outcome


def with_lost(outcome, lost):
    """The outcome, said to have restarted (and why first in its notice) when `lost`."""
    if lost:
        outcome['restarted'] = True
        outcome['notice'] = ' '.join(n for n in (lost, outcome.get('notice')) if n)
    return outcome


# What each long-lived process loses when it ends.
LOST_STATE = {
    'Python kernel': 'Variables and imports from earlier executions are gone.',
    'Deno host': 'Top-level names and imports of earlier TypeScript and JavaScript executions are gone.',
    'bash shell': 'Shell variables and functions of earlier executions are gone.',
}


def restarted_notice(label):
    """'The Python kernel was restarted: variables and imports ... are gone.'"""
    state = LOST_STATE[label]
    return 'The %s was restarted: %s%s' % (label, state[0].lower(), state[1:])


PYTHON_LOST = restarted_notice('Python kernel')
DENO_LOST = restarted_notice('Deno host')
BASH_LOST = restarted_notice('bash shell')
BASH_BACKGROUND = ('Processes the script left running were ended, and the bash shell with them: shell variables and'
                   ' functions of earlier executions are gone.')
BASH_EXITED = ('The script ended the bash shell (exit, or an error under set -e), so shell variables and functions'
               ' of earlier executions are gone.')
SEPARATE_DENO = ('This execution ran in a separate Deno process because its permissions are narrowed: top-level'
                 ' names and imports of earlier executions are not visible to it, and nothing it defined is kept.')
BEYOND_HOST = ('This execution ran in a separate Deno process because its permissions go beyond what the Deno host'
               ' was started with (%s): top-level names and imports of earlier executions are not visible to it,'
               ' and nothing it defined is kept.')


def hint_for(exc):
    if isinstance(exc, BlockingIOError):  # EAGAIN from fork: the nproc limit
        return (' (the sandbox is at its process limit; processes started from Python keep'
                ' running between executions until they exit or the kernel restarts)')
    return ''


def ms(seconds):
    return round(seconds * 1000, 3)


def stop_notice(reason, timeout_ms):
    if reason == 'timeout':
        return 'Execution timed out after %s s and was killed.' % ('%g' % (timeout_ms / 1000))
    return 'Execution cancelled and killed.'


def done_event(exec_id, exitCode=None, durationMs=0, timedOut=False, killed=False, restarted=False,
               truncated=None, files=None, notice=None, result=None, error=None):
    event = {'type': 'done', 'id': exec_id, 'exitCode': exitCode, 'durationMs': durationMs,
             'timedOut': timedOut, 'killed': killed, 'restarted': restarted,
             'truncated': truncated or {'stdout': 0, 'stderr': 0}, 'files': files or []}
    if result is not None:
        event['result'] = result
    if notice:
        event['notice'] = notice
    if error:
        event['error'] = error
    return event
