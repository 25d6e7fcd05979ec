"""The Python kernel: a child of the runner that keeps interpreter state between
executions. User code runs in this process, as the sandbox user.

It runs in its own session so the runner can SIGKILL its whole process group on a
timeout and start a fresh one. Its fd 1 and 2 are pipes the runner reads and streams,
so print(), sys.stdout.write() and C-level or subprocess writes to fd 1/2 all reach the
user. Requests and replies travel on two extra pipes (argv[1]: requests in, argv[2]:
replies out), one JSON object per line:

  -> {"op": "exec", "id", "code", "env", "cwd", "figdir"}
  <- {"id", "exitCode", "result", "error"}
  -> {"op": "preload", "modules": [...]}
  <- {"loaded": [...], "error", "ms"}

At start it limits its address space to argv[4] bytes (0: no limit), copies matplotlib's
prebuilt font cache into MPLCONFIGDIR (it runs as the sandbox user, who must own that
folder), imports the modules named by the JSON list in argv[3] (the runner re-preloads
after a restart) and writes {"ready": true}.

The kernel runs user code in its own process, so the runner trusts nothing it reads
from the reply pipe: it takes a reply only for the execution it sent, and only the
fields and sizes above.

Standard library only. Imports are kept lazy so that the kernel is ready quickly and
an idle one stays small: _ast instead of ast, the runner's JSON (sandgate_runner.wire) instead
of json, traceback when an error is formatted, linecache when anything imports it (cell
sources wait until then): together with what they pull in (re, enum, tokenize) about
1.4 MB less for every idle sandbox.
"""
import _ast
import os
import sys
import time

from sandgate_runner import wire  # boot.py has loaded it already (this module runs as __main__)

MAX_RESULT_CHARS = 4096
# Sources of past cells stay in linecache (for tracebacks) up to this many cells.
MAX_CACHED_CELLS = 200

KERNEL_FILE = os.path.abspath(__file__)
BASE_ENV = dict(os.environ)

namespace = {'__name__': '__main__', '__builtins__': __builtins__, '__doc__': None}
cell_count = 0
cached_cells = []
event_loop = None  # created on the first top-level await


def write_reply(fd, obj):
    data = (wire.dumps(obj, ascii=True) + '\n').encode()
    while data:
        data = data[os.write(fd, data):]


def flush_std():
    for stream in (sys.__stdout__, sys.__stderr__, sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:
            pass


def set_environment(env):
    """Makes `env` the complete environment (os.environ and the C-level one)."""
    os.environ.clear()
    os.environ.update(env)


def add_pythonpath(env):
    """PYTHONPATH is read only at interpreter start; honour a per-exec one by hand."""
    for entry in reversed([p for p in env.get('PYTHONPATH', '').split(os.pathsep) if p]):
        if entry not in sys.path:
            sys.path.insert(1, entry)


def add_user_site():
    """The user's own packages (pip installs into ~/.local, that is /workspace/.local) are
    importable from the next execution on, even when this interpreter started before the
    folder existed: site only looks at start. The finders' caches are dropped, so a package
    installed during the last execution (by pip in bash) is found."""
    site = sys.modules.get('site')
    if site is None or not getattr(site, 'ENABLE_USER_SITE', False):
        return
    try:
        folder = site.getusersitepackages()
    except Exception:
        return
    if folder not in sys.path and os.path.isdir(folder):
        site.addsitedir(folder)
    import importlib
    importlib.invalidate_caches()


# Cell sources for linecache, kept here until something imports linecache.
pending_sources = {}


def remember_source(filename, code):
    entry = (len(code), None, code.splitlines(True), filename)
    linecache = sys.modules.get('linecache')
    cache = linecache.cache if linecache is not None else pending_sources
    cache[filename] = entry
    cached_cells.append(filename)
    while len(cached_cells) > MAX_CACHED_CELLS:
        cache.pop(cached_cells.pop(0), None)


class LinecacheHook:
    """First on sys.meta_path until linecache is imported (by a traceback, warnings,
    inspect or the user): the loader it finds is wrapped so that the new module starts
    with the cell sources remembered so far."""

    @classmethod
    def find_spec(cls, name, path=None, target=None):
        if name != 'linecache':
            return None
        for finder in sys.meta_path:
            find = getattr(finder, 'find_spec', None) if finder is not cls else None
            spec = find(name, path, target) if find else None
            if spec is not None:
                break
        else:
            return None
        sys.meta_path.remove(cls)  # (the import system stops iterating: we return a spec)
        spec.loader = FillingLoader(spec.loader)
        return spec


class FillingLoader:
    def __init__(self, loader):
        self.loader = loader

    def __getattr__(self, name):  # get_source, get_filename, ... of the real loader
        return getattr(self.loader, name)

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module):
        self.loader.exec_module(module)
        module.cache.update(pending_sources)
        pending_sources.clear()


def run_code(code_obj):
    """Evaluates a compiled cell piece; runs it on an event loop when it awaits."""
    global event_loop
    value = eval(code_obj, namespace)
    if code_obj.co_flags & 0x80:  # CO_COROUTINE: the cell used top-level await
        import asyncio
        if event_loop is None:
            event_loop = asyncio.new_event_loop()
        value = event_loop.run_until_complete(value)
    return value


def user_traceback(exc):
    """The traceback without the kernel's own frames."""
    import traceback
    tb = exc.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename == KERNEL_FILE:
        tb = tb.tb_next
    return ''.join(traceback.format_exception(type(exc), exc, tb))


def error_of(exc, text):
    return {'name': type(exc).__name__, 'message': str(exc), 'traceback': text}


def safe_repr(value):
    try:
        text = repr(value)
    except BaseException as exc:  # a broken __repr__ must not break the kernel
        return '<repr() failed: %s: %s>' % (type(exc).__name__, exc)
    if len(text) > MAX_RESULT_CHARS:
        text = text[:MAX_RESULT_CHARS] + '... [%d more characters]' % (len(text) - MAX_RESULT_CHARS)
    return text


def execute(code):
    """Runs one cell. Returns (exitCode, result repr or None, error or None)."""
    global cell_count
    cell_count += 1
    filename = '<cell-%d>' % cell_count
    remember_source(filename, code)
    flags = _ast.PyCF_ALLOW_TOP_LEVEL_AWAIT
    try:
        tree = compile(code, filename, 'exec', flags | _ast.PyCF_ONLY_AST)
    except (SyntaxError, ValueError) as exc:
        import traceback
        text = ''.join(traceback.format_exception_only(type(exc), exc))
        sys.stderr.write(text)
        return 1, None, error_of(exc, text)

    # A final expression statement is evaluated separately so its value can be returned.
    last = None
    if tree.body and isinstance(tree.body[-1], _ast.Expr):
        last = _ast.Expression(tree.body.pop().value)
    try:
        if tree.body:
            run_code(compile(tree, filename, 'exec', flags))
        if last is None:
            return 0, None, None
        value = run_code(compile(last, filename, 'eval', flags))
    except SystemExit as exc:
        code_ = exc.code
        if code_ is None:
            return 0, None, None
        if isinstance(code_, int):
            return code_, None, None
        sys.stderr.write('%s\n' % (code_,))
        return 1, None, None
    except BaseException as exc:
        text = user_traceback(exc)
        sys.stderr.write(text)
        return 1, None, error_of(exc, text)
    if value is None:
        return 0, None, None
    namespace['_'] = value
    return 0, safe_repr(value), None


def save_figures(figdir, exec_id):
    """Saves every open matplotlib figure as PNG under figdir, then closes them all.
    Returns why saving failed (for the runner's notice), or None."""
    plt = sys.modules.get('matplotlib.pyplot')
    if plt is None:
        return None
    try:
        nums = plt.get_fignums()
        if not nums:
            return None
        os.makedirs(figdir, exist_ok=True)
        safe_id = ''.join(c if c.isalnum() or c in '-_' else '_' for c in exec_id)[:48] or 'exec'
        stamp = time.strftime('%Y%m%d-%H%M%S')
        for i, num in enumerate(nums, 1):
            path = unique_path(figdir, 'figure-%s-%s-%d' % (stamp, safe_id, i), '.png')
            plt.figure(num).savefig(path, format='png')
    except OSError as exc:  # e.g. a read-only /workspace: said in the notice
        return str(exc)
    except Exception as exc:
        import traceback
        sys.stderr.write('[sandgate: could not save figures]\n' + traceback.format_exc())
        return '%s: %s' % (type(exc).__name__, exc)
    finally:
        try:
            plt.close('all')
        except Exception:
            pass
    return None


def unique_path(directory, stem, ext):
    path = os.path.join(directory, stem + ext)
    n = 2
    while os.path.exists(path):
        path = os.path.join(directory, '%s-%d%s' % (stem, n, ext))
        n += 1
    return path


def handle_exec(req):
    env = req.get('env') or {}
    set_environment(env)
    add_pythonpath(env)
    add_user_site()
    try:
        os.chdir(req.get('cwd') or '/workspace')
    except OSError as exc:
        sys.stderr.write('[sandgate: cannot enter the workspace: %s]\n' % exc)
    sys.argv = ['']
    try:
        exit_code, result, error = execute(req.get('code', ''))
        figure_error = save_figures(req.get('figdir') or 'figures', str(req.get('id', 'exec')))
    finally:
        flush_std()
        set_environment(BASE_ENV)
    reply = {'id': req.get('id'), 'exitCode': exit_code, 'result': result, 'error': error}
    if figure_error:
        reply['figureError'] = figure_error
    return reply


def preload(modules):
    """Imports modules (with the kernel's base environment). Returns (loaded, error or None)."""
    import importlib
    loaded, errors = [], []
    for name in modules:
        try:
            importlib.import_module(name)
            loaded.append(name)
        except BaseException as exc:
            errors.append('%s: %s: %s' % (name, type(exc).__name__, exc))
    flush_std()
    return loaded, '; '.join(errors) or None


MPL_CACHE_SOURCE = '/opt/sandgate/mplconfig'


def copy_missing(src, dst):
    """Copies src's tree into dst, keeping files dst already has."""
    try:
        names = os.listdir(src)
    except OSError:
        return
    os.makedirs(dst, exist_ok=True)
    for name in names:
        s, d = os.path.join(src, name), os.path.join(dst, name)
        if os.path.isdir(s):
            copy_missing(s, d)
        elif not os.path.exists(d):
            with open(s, 'rb') as fin, open(d, 'wb') as fout:
                fout.write(fin.read())


def limit_memory(limit):
    """RLIMIT_AS: a huge allocation raises MemoryError instead of exhausting the whole
    container (gVisor kills a container that runs out of memory as a whole)."""
    if limit <= 0:
        return
    import resource
    try:
        soft, hard = resource.getrlimit(resource.RLIMIT_AS)
        if hard != resource.RLIM_INFINITY:
            limit = min(limit, hard)
        resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
    except (ValueError, OSError) as exc:
        sys.stderr.write('[kernel] cannot limit memory: %s\n' % exc)


def main():
    req_fd, reply_fd = int(sys.argv[1]), int(sys.argv[2])
    initial = wire.loads(sys.argv[3]) if len(sys.argv) > 3 else []
    limit_memory(int(sys.argv[4]) if len(sys.argv) > 4 else 0)
    # User subprocesses must not inherit the control pipes: a survivor holding the
    # reply pipe would hide the kernel's death from the runner.
    os.set_inheritable(req_fd, False)
    os.set_inheritable(reply_fd, False)
    requests = os.fdopen(req_fd, 'rb')
    sys.stdin = open(os.devnull)
    # Every Python-level write goes straight to fd 1/2 so the runner can stream it.
    sys.stdout.reconfigure(write_through=True)
    sys.stderr.reconfigure(write_through=True)
    # Like a notebook: the working directory (the workspace) is importable, the runner's
    # own directory is not.
    sys.path[0] = ''
    sys.argv = ['']
    if 'linecache' not in sys.modules:
        sys.meta_path.insert(0, LinecacheHook)
    try:
        # Matplotlib's prebuilt font cache, so the first plot does not rebuild it.
        tmp = os.environ.get('SANDGATE_TMP') or '/tmp'
        copy_missing(MPL_CACHE_SOURCE, os.environ.get('MPLCONFIGDIR') or os.path.join(tmp, '.matplotlib'))
    except OSError as exc:
        sys.stderr.write('[kernel] could not copy the matplotlib cache: %s\n' % exc)
    if initial:
        preload(initial)
    write_reply(reply_fd, {'ready': True})
    for line in requests:
        req = wire.loads(line)
        op = req.get('op')
        if op == 'exec':
            reply = handle_exec(req)
        elif op == 'preload':
            started = time.monotonic()
            loaded, error = preload(req.get('modules') or [])
            reply = {'loaded': loaded, 'error': error, 'ms': round((time.monotonic() - started) * 1000, 1)}
        else:
            reply = {'error': 'unknown kernel op %r' % (op,)}
        write_reply(reply_fd, reply)


if __name__ == '__main__':
    main()
