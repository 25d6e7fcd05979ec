"""What keeps an idle sandbox small (boot.py, the first stage in __main__.py): the runner
and the kernel load their code from a bytecode cache and import no heavy module, and
the kernel sees none of the runner's."""
import os
import subprocess
import sys
import tempfile
import unittest

from harness import ROOT, Runner
from sandgate_runner.parent.settings import OWN_MODULES


class LeanTest(unittest.TestCase):
    """What keeps an idle sandbox small (see parent/main.py's docstring)."""

    HEAVY = {'json', 're', 'enum', 'subprocess', 'socket', 'signal', 'ast', 'traceback', 'linecache', 'tokenize',
             'ctypes'}

    def added_modules(self, code, *flags):
        """Modules that importing our module adds to those of a bare interpreter."""
        probe = ('import sys\nbase = set(sys.modules)\nsys.path.insert(0, %r)\nsys.argv = ["x"]\n%s\n'
                 'print(" ".join(sorted(set(sys.modules) - base)))' % (ROOT, code))
        done = subprocess.run([sys.executable] + list(flags) + ['-c', probe], capture_output=True, text=True,
                              timeout=30, env=dict(os.environ, SANDGATE_TMP=tempfile.gettempdir()))
        self.assertEqual(done.returncode, 0, done.stderr)
        return set(done.stdout.split())

    def test_runner_imports_no_heavy_modules(self):
        self.assertEqual(self.added_modules('import sandgate_runner.parent.main', '-I', '-S') & self.HEAVY, set())

    def test_kernel_imports_no_heavy_modules(self):
        self.assertEqual(self.added_modules('import sandgate_runner.kernel.main') & self.HEAVY, set())

    def test_bytecode_cache(self):
        r = Runner()
        self.addCleanup(r.close)
        r.run('1')
        cache = os.path.join(r.tmp, '.sandgate', 'pycache')
        names = {name[:-len('.pyc')] for _, _, files in os.walk(cache) for name in files}
        # Not the lockdown helper: sandboxed code could write it, and it runs before the lockdown.
        self.assertEqual(names, set(OWN_MODULES))
        self.assertIn('sandgate_runner.parent.worker', names)
        # The kernel has none of the runner's modules (nor the helper's) and no path to them.
        _, _, done = r.run('import sys\n(sys.path[0], sys.argv, sorted(m for m in sys.modules if m.startswith(('
                           '"sandgate_runner.parent", "sandgate_runner.helper"))))')
        self.assertEqual(done['result'], "('', [''], [])")


if __name__ == '__main__':
    unittest.main()
