"""Starts the runner's long-lived processes from the bytecode cache the runner's first
stage writes. Runs in both: the runner (parent) and every Python kernel (child).

Compiling a module leaves its parse garbage in the process: ~4 MB for the runner's
modules, ~1 MB for the kernel's, kept for the sandbox's whole life. So the first stage
(__main__.py) compiles the modules (parent.settings.OWN_MODULES, dotted names) into
`<state dir>/pycache/<name>.pyc` and re-executes itself; the runner and every kernel
then load the code objects from there (falling back to the source when a cache file is
missing or stale). The runner imports its parts through a finder that serves only the
names it was given; kernels load only the wire and themselves, and add no finder that
user code would meet. Unlike sys.pycache_prefix, this touches nothing else: the
standard library keeps its own __pycache__. This module and the package's __init__ are
the only ones compiled from source in those processes.

  python3 -I -S -c "$(command(CACHE, 'sandgate_runner.parent.main', OWN_MODULES))"  # imports it, calls main()
  python3 -c "$(command(CACHE, 'sandgate_runner.kernel.main', as_main=True))" ARGS...  # runs it as __main__
"""
import marshal
import os
import sys

PACKAGE = __name__.rpartition('.')[0]  # sandgate_runner
PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(PACKAGE_DIR)  # what goes on sys.path
WIRE = PACKAGE + '.wire'
HEADER = 16  # magic, flags, source mtime, source size


def source_of(name):
    """(source path, is a package) of a dotted module name of this package."""
    path = os.path.join(ROOT, *name.split('.'))
    if os.path.isdir(path):
        return os.path.join(path, '__init__.py'), True
    return path + '.py', False


def write_cache(cache_dir, names):
    """Compiles the modules into cache_dir (the runner's first stage). Returns problems."""
    import py_compile
    problems = []
    for name in names:
        source, _ = source_of(name)
        try:
            py_compile.compile(source, cfile=os.path.join(cache_dir, name + '.pyc'), dfile=source, doraise=True,
                               invalidation_mode=py_compile.PycInvalidationMode.TIMESTAMP)
        except (py_compile.PyCompileError, OSError) as exc:
            problems.append('%s: %s' % (name, exc))
    return problems


def code_of(cache_dir, name):
    source, _ = source_of(name)
    try:
        with open(os.path.join(cache_dir, name + '.pyc'), 'rb') as f:
            data = f.read()
        st = os.stat(source)
        magic = sys.modules['_frozen_importlib_external'].MAGIC_NUMBER
        if (data[:4] == magic and int.from_bytes(data[8:12], 'little') == int(st.st_mtime) & 0xFFFFFFFF
                and int.from_bytes(data[12:16], 'little') == st.st_size & 0xFFFFFFFF):
            return marshal.loads(memoryview(data)[HEADER:]), source
    except (OSError, ValueError, EOFError, TypeError, KeyError):
        pass
    with open(source, 'rb') as f:
        return compile(f.read(), source, 'exec'), source


def load(cache_dir, name, as_main=False):
    """Imports module `name` (or runs it as __main__) from the cache, without a finder:
    its parent package must have been imported already."""
    code, source = code_of(cache_dir, name)
    if as_main:
        module = sys.modules['__main__']
        sys.argv[0] = source
    else:
        module = type(sys)(name)
        parent, _, child = name.rpartition('.')
        module.__package__ = parent
        sys.modules[name] = module
        setattr(sys.modules[parent], child, module)
    module.__file__ = source
    exec(code, module.__dict__)
    return module


class CachedModules:
    """A sys.meta_path finder and loader for the named modules of this package, from the cache."""

    def __init__(self, cache_dir, names):
        self.cache_dir = cache_dir
        self.names = frozenset(names)

    def find_spec(self, name, path=None, target=None):
        if name not in self.names:
            return None
        source, package = source_of(name)
        spec = sys.modules['_frozen_importlib'].ModuleSpec(name, self, origin=source, is_package=package)
        if package:
            spec.submodule_search_locations = [os.path.dirname(source)]
        return spec

    def create_module(self, spec):
        return None

    def exec_module(self, module):
        code, source = code_of(self.cache_dir, module.__name__)
        module.__file__ = source
        exec(code, module.__dict__)


def start(cache_dir, name, modules=(), as_main=False):
    if modules:
        sys.meta_path.insert(0, CachedModules(cache_dir, modules))
    load(cache_dir, WIRE)
    if as_main:
        load(cache_dir, name, as_main=True)
    else:
        __import__(name)
        sys.modules[name].main()


def command(cache_dir, name, modules=(), as_main=False):
    """The `python -c` code for start(). sys.path[0] is the package's folder's parent,
    where -c would have put '' (as a script, the kernel replaces it with '')."""
    return ('import sys; sys.path[0:%d] = [%r]; import %s.boot; %s.boot.start(%r, %r, %r, %r)'
            % (1 if as_main else 0, ROOT, PACKAGE, PACKAGE, cache_dir, name, tuple(modules), as_main))
