"""The runner's settings and the few things every part of it uses: where things are
(all movable for tests, see main.py), limits, the user code's uid, diagnostics to
stderr, and returning freed heap to the system."""
import _signal
import os
import sys

from .. import boot

# The runner's folder (the image's /opt/sandgate/runner): the package and the bundled
# Deno host (deno/, see scripts/build-deno-host.sh).
PACKAGE_DIR = boot.PACKAGE_DIR
RUNNER_DIR = boot.ROOT
TMP = os.environ.get('SANDGATE_TMP') or '/tmp'
STATE_DIR = os.path.join(TMP, '.sandgate')
PYCACHE = os.path.join(STATE_DIR, 'pycache')
# The runner's modules and the kernel's, loaded from the bytecode cache (see boot.py).
# Not the lockdown helper: it runs before the lockdown it applies, so it is compiled from
# its read-only source.
OWN_MODULES = tuple('sandgate_runner.' + name for name in (
    'wire', 'parent', 'parent.settings', 'parent.gateway_channel', 'parent.output', 'parent.workspace_scan',
    'parent.procs', 'parent.sweeper', 'parent.narrowing', 'parent.kernel_handle', 'parent.script_files',
    'parent.deno_host', 'parent.bash_shell', 'parent.selector_loop', 'parent.bridge_server', 'parent.egress_relay', 'parent.jobs', 'parent.outcomes',
    'parent.pump', 'parent.kernel_execs', 'parent.host_execs', 'parent.process_execs', 'parent.worker',
    'parent.main', 'kernel.main'))
WORKSPACE = os.path.abspath(os.environ.get('SANDGATE_WORKSPACE') or '/workspace')
BRIDGE_PATH = os.environ.get('SANDGATE_BRIDGE') or os.path.join(STATE_DIR, 'bridge.sock')
# The egress relay's port on the sandbox's loopback (egress_relay.py); it carries
# connections to the gateway only when SANDGATE_EGRESS_OPEN=1 (a ceiling that grants
# `net`), and otherwise answers each with a refusal itself. Unset: no listener.
EGRESS_PORT = int(os.environ.get('SANDGATE_EGRESS_PORT') or 0)
DENO = os.environ.get('SANDGATE_DENO') or '/usr/local/bin/deno'
# Deno's version, written when the image is built (sandbox/Dockerfile): reading it costs
# nothing, while running `deno --version` in every new sandbox costs ~100 ms of CPU and
# leaves gVisor one more stub address space (host processes) for the sandbox's life.
DENO_VERSION_FILE = os.environ.get('SANDGATE_DENO_VERSION_FILE') or '/opt/sandgate/deno-version'
BASH = '/bin/bash'
# The kernel's address-space limit (RLIMIT_AS), so that a huge allocation raises
# MemoryError instead of exhausting the container: under gVisor the container is
# killed as a whole when it runs out of memory, taking the runner with it.
# Default: 75% of MemTotal (gVisor shows the container's --memory there); 0: no limit.
KERNEL_MEMORY = os.environ.get('SANDGATE_KERNEL_MEMORY')
UNSHARE = os.environ.get('SANDGATE_UNSHARE') or '/usr/bin/unshare'
SETPRIV = os.environ.get('SANDGATE_SETPRIV') or '/usr/bin/setpriv'
# Every process the runner starts for user code (kernels, executions, lockdown helpers)
# runs as this uid:gid with no capability. The runner itself runs as root inside gVisor
# with only SETUID, SETGID and KILL (the container grants no more), so code cannot open
# its descriptors through /proc (the protocol stream), trace it or signal it: being the
# same uid would be enough for all three, and gVisor does not protect /proc/<pid>/fd of a
# non-dumpable process. Both this and the sweep of stray processes (Sweeper) act only in
# a sandbox: the image starts the runner with --in-sandbox. Elsewhere (the unit tests, on
# a host) the runner runs code as itself and never looks at other processes.
IN_SANDBOX = '--in-sandbox' in sys.argv[1:]
RUN_AS = os.environ.get('SANDGATE_RUN_AS') or '1000:1000'
SANDBOX_UID, SANDBOX_GID = (int(part) for part in RUN_AS.split(':'))
SEPARATED = IN_SANDBOX and os.getuid() == 0 and SANDBOX_UID != 0
DROP_ARGV = ([SETPRIV, '--reuid=%d' % SANDBOX_UID, '--regid=%d' % SANDBOX_GID, '--clear-groups',
              '--inh-caps=-all', '--'] if SEPARATED else [])
# As helper.lockdown.UNSHARE_ARGS (not imported here: it loads ctypes).
UNSHARE_ARGS = ['--user', '--map-root-user', '--mount', '--pid', '--fork', '--mount-proc', '--kill-child']
HELPER_ENV = {'PATH': '/usr/local/bin:/usr/bin:/bin', 'LANG': 'C.UTF-8'}
# The kernel runs as __main__, as if started as a script, but from the bytecode cache.
KERNEL_BOOT = boot.command(PYCACHE, 'sandgate_runner.kernel.main', as_main=True)
LOCKDOWN_SCRIPT = os.path.join(PACKAGE_DIR, 'helper', 'lockdown.py')
# The runner's state folder (scripts, the bridge socket, the bytecode cache): user code
# may read it (scripts, kernel code) but never write it when it runs as another uid.
STATE_DIR_MODE = 0o755 if SEPARATED else 0o700
FIGURE_DIR = os.path.join(WORKSPACE, 'figures')

LANGUAGES = ('python', 'typescript', 'javascript', 'bash')
DEFAULT_TIMEOUT_MS = 30_000
DEFAULT_OUTPUT_LIMIT = 1 << 20
FLUSH_SECONDS = 0.02      # output is batched: sent after 20 ms ...
FLUSH_BYTES = 4096        # ... or once 4 KB are pending
READ_CHUNK = 65536
MAX_KERNEL_REPLY = 1 << 20  # longest reply line taken from a kernel
MAX_RESULT_CHARS = 4200     # a result repr: kernel.py cuts at 4096 and says how much more
SCAN_LIMIT = 20_000       # workspace entries looked at per snapshot
SCAN_MAX_DEPTH = 64       # folders nested deeper are not looked into
SCAN_MAX_SECONDS = 0.5    # a snapshot stops after this long
MAX_FILE_CHANGES = 1000   # file changes listed in one `done`
KERNEL_BOOT_SECONDS = 120
PRELOAD_SECONDS = 300
HELPER_SECONDS = 30       # a lockdown helper must be narrowed and exec'ing within this
SPARE_IDLE_SECONDS = 120  # a helper started ahead is dropped after this long unused
DRAIN_GRACE = 0.2         # after a process ended: how long to wait for more output
DRAIN_MAX = 0.5           # ... and at most this long in all
GROUP_KILL_SECONDS = 2.0  # how long to keep killing a process group that still has members

TRIM_IDLE_SECONDS = 1.0   # idle this long after a job: return freed heap to the system
SIGNAL_NAMES = {}         # number -> name, as signal.Signals(n).name gives it
for _name in sorted(vars(_signal)):
    if _name.startswith('SIG') and not _name.startswith('SIG_') and isinstance(getattr(_signal, _name), int):
        SIGNAL_NAMES.setdefault(getattr(_signal, _name), _name)
NARROWING_FAILED = 'The narrowed permissions of this execution could not be applied, so it did not run: %s'
SEPARATE_KERNEL = ('This execution ran in a separate Python interpreter because its permissions are narrowed:'
                   ' variables and imports of earlier executions are not visible to it, and nothing it defined'
                   ' is kept.')


def diag(message):
    """A diagnostic for whoever reads the container's stderr (never the protocol)."""
    try:
        sys.stderr.write('[runner] %s\n' % message)
        sys.stderr.flush()
    except (OSError, ValueError):
        pass


_malloc_trim = None


def malloc_trim():
    """Returns the free parts of the C heap to the system (glibc keeps them otherwise;
    compiling this file alone leaves ~2 MB). A few milliseconds, done only when idle."""
    global _malloc_trim
    if _malloc_trim is None:
        try:
            import ctypes
            _malloc_trim = ctypes.CDLL(None).malloc_trim
        except (ImportError, OSError, AttributeError):
            _malloc_trim = False
    if _malloc_trim:
        _malloc_trim(0)
