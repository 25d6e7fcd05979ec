"""The runner's first stage: fills the bytecode cache, then becomes the runner.

The image starts it as `python3 -I -S /opt/sandgate/runner/sandgate_runner --in-sandbox`
(-I -S: nothing from the environment, the workspace or site-packages runs in the
runner, which is root in the sandbox); `python3 -m sandgate_runner` works as well. It
compiles the runner's modules (parent.settings.OWN_MODULES) into the cache and
re-executes itself as `python3 -I -S` loading them from there (boot.py): compiling
them in the process that stays would leave ~4 MB behind for the sandbox's whole life.
"""
import os
import sys

if not __package__:
    # Started as a folder: its own path is sys.path[0]; the package's parent goes there.
    sys.path[0] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

from sandgate_runner import boot  # noqa: E402
from sandgate_runner.parent.settings import OWN_MODULES, PYCACHE  # noqa: E402

try:
    # Readable by the uid user code runs as (kernels load from it), writable by us only.
    os.makedirs(PYCACHE, mode=0o755, exist_ok=True)
    problems = boot.write_cache(PYCACHE, OWN_MODULES)
except OSError as exc:
    problems = [str(exc)]
for problem in problems:
    sys.stderr.write('[runner] no bytecode cache for %s\n' % problem)
os.execv(sys.executable, [sys.executable, '-I', '-S', '-c', boot.command(PYCACHE, 'sandgate_runner.parent.main',
                                                                         OWN_MODULES)] + sys.argv[1:])
