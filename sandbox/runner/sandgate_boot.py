"""Starts the runner's long-lived processes from the bytecode cache runner.py writes.

Compiling a module leaves its parse garbage in the process: ~4 MB for the runner's
modules, ~1 MB for kernel.py, kept for the sandbox's whole life. So runner.py, started
as a script, compiles its modules (runner_base.OWN_MODULES) into
`<state dir>/pycache/<name>.pyc` and re-executes itself; the runner and every kernel
then load the code objects from there (falling back to the source when a cache file is
missing or stale). The runner imports its parts through a finder that serves only the
names it was given; kernels load only sandgate_wire and themselves, and add no finder
that user code would meet. Unlike sys.pycache_prefix, this touches nothing else: the
standard library keeps its own __pycache__.

  python3 -I -S -c "$(command(CACHE, 'runner', OWN_MODULES))"     # imports runner, calls main()
  python3 -c "$(command(CACHE, 'kernel', as_main=True))" ARGS...  # as `python3 kernel.py ARGS...`
"""
import marshal
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
HEADER = 16  # magic, flags, source mtime, source size


def write_cache(cache_dir, names):
    """Compiles the modules into cache_dir (runner.py's first stage). Returns problems."""
    import py_compile
    problems = []
    for name in names:
        source = os.path.join(HERE, name + '.py')
        try:
            py_compile.compile(source, cfile=os.path.join(cache_dir, name + '.pyc'), dfile=source, doraise=True,
                               invalidation_mode=py_compile.PycInvalidationMode.TIMESTAMP)
        except (py_compile.PyCompileError, OSError) as exc:
            problems.append('%s: %s' % (name, exc))
    return problems


def code_of(cache_dir, name):
    source = os.path.join(HERE, name + '.py')
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
    """Imports module `name` (or runs it as __main__) from the cache."""
    code, source = code_of(cache_dir, name)
    if as_main:
        module = sys.modules['__main__']
        sys.argv[0] = source
    else:
        module = type(sys)(name)
        sys.modules[name] = module
    module.__file__ = source
    exec(code, module.__dict__)
    return module


class CachedModules:
    """A sys.meta_path finder and loader for the named modules of this directory, from the cache."""

    def __init__(self, cache_dir, names):
        self.cache_dir = cache_dir
        self.names = frozenset(names)

    def find_spec(self, name, path=None, target=None):
        if name not in self.names:
            return None
        return sys.modules['_frozen_importlib'].ModuleSpec(name, self, origin=os.path.join(HERE, name + '.py'))

    def create_module(self, spec):
        return None

    def exec_module(self, module):
        code, source = code_of(self.cache_dir, module.__name__)
        module.__file__ = source
        exec(code, module.__dict__)


def start(cache_dir, name, modules=(), as_main=False):
    if modules:
        sys.meta_path.insert(0, CachedModules(cache_dir, modules))
    load(cache_dir, 'sandgate_wire')
    if as_main:
        load(cache_dir, name, as_main=True)
    else:
        load(cache_dir, name).main()


def command(cache_dir, name, modules=(), as_main=False):
    """The `python -c` code for start(). sys.path[0] is this directory, as it is for a
    script (kernel.py replaces it), where -c would have put ''."""
    return ('import sys; sys.path[0:%d] = [%r]; import sandgate_boot; sandgate_boot.start(%r, %r, %r, %r)'
            % (1 if as_main else 0, HERE, cache_dir, name, tuple(modules), as_main))
