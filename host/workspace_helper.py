"""The gateway's hands in one workspace: every file operation the gateway makes on a
user's /workspace (MCP file tools, resources, the file browser) is done by this process.

The workspace belongs to code in a sandbox, which can change it at any moment: swap a
folder for a symlink between a check and a use, plant FIFOs, nest folders thousands
deep. So this process is confined before it reads a single request:

  unshare --pid --fork --kill-child --net --ipc -- python3 -I -S workspace_helper.py ROOT UID GID

(a gateway that is not root adds --user --map-root-user and passes UID -1: the helper
then keeps the gateway's own uid, as the files it writes do in that mode);

- its own pid, network and IPC namespaces (no process of the host to see or signal, no
  network at all; it dies with its parent);
- chroot into ROOT, the workspace itself (opened with O_NOFOLLOW first): a path that
  escapes through a swapped symlink, or `..`, can only ever land inside ROOT;
- then uid/gid UID:GID (the sandbox user) with no supplementary group, no capability,
  no_new_privs and not dumpable: it acts with exactly the power the sandbox's own code
  has over these files, never root's (a file it creates is the sandbox user's without a
  chown; a file it opens is one that user could open).

Within that, every path is resolved one component at a time from a directory descriptor
with O_NOFOLLOW (a symlink anywhere is refused, as the MCP tools promise), files are
opened O_NONBLOCK and checked with fstat before use (a FIFO or device is refused, never
blocked on), and nothing is truncated before the descriptor is known to be a regular
file.

Wire (stdin -> stdout), one request at a time, answered in order:
  request:  one JSON line {"op", ...}; with "bytes": N, N raw bytes follow
  reply:    one JSON line {"ok": true, ...} or {"ok": false, "code", "message"};
            with "bytes": N, N raw bytes follow
Ops: stat {path}; read {path, offset, length}; write {path, append} + bytes;
mkdirs {path}; remove {path}; rename {from, to}; list {path, recursive, limit, depth}.
Paths are relative to the workspace, '/'-separated, already normalised by the gateway
(no '.', '..' or empty segment); '' is the workspace itself. A name that is not UTF-8
travels, both ways, with each byte that is not part of a character as its lone
surrogate's JSON escape (0xFF as \\udcff, Python's surrogateescape; see wire()).

Standard library only; runs on the host's python3.
"""
import ctypes
import errno
import json
import os
import stat
import sys
import time

MAX_READ = 16 << 20        # bytes one read may return
MAX_REPLY = 2 << 20        # bytes one reply header may take (a listing stops before)
MAX_PATH = 4096            # a longer path is not listed
MAX_WRITE = 64 << 20       # bytes one write may carry
MAX_LIST = 20_000          # entries one listing may return
MAX_DEPTH = 64             # folders a recursive listing or removal goes into
LIST_SECONDS = 2.0         # a listing stops after this long
REMOVE_ENTRIES = 200_000   # a removal stops after this many entries (and says so)

SURROGATE_ESCAPES = {c: '\\u%04x' % c for c in range(0xd800, 0xe000)}  # for wire()

DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
PR_SET_NO_NEW_PRIVS = 38
PR_SET_DUMPABLE = 4
AT_FDCWD = -100
RENAME_NOREPLACE = 1
LIBC = ctypes.CDLL(None, use_errno=True)


class Refused(Exception):
    """A request that cannot be done; `code` is the errno name the gateway maps."""

    def __init__(self, code, message):
        super().__init__(message)
        self.code = code


class CapHeader(ctypes.Structure):
    _fields_ = [('version', ctypes.c_uint32), ('pid', ctypes.c_int)]


class CapData(ctypes.Structure):
    _fields_ = [('effective', ctypes.c_uint32), ('permitted', ctypes.c_uint32), ('inheritable', ctypes.c_uint32)]


def confine(root, uid, gid):
    """chroot into root, then become uid:gid (uid < 0: stay) with no capability at all
    (see the module doc). Verifies the result: a chroot that could be left is an error."""
    fd = os.open(root, DIR_FLAGS)
    os.fchdir(fd)
    os.close(fd)
    os.chroot('.')
    os.chdir('/')
    if uid >= 0:
        os.setgroups([])
        os.setresgid(gid, gid, gid)
        os.setresuid(uid, uid, uid)
    libc = LIBC
    # Every capability set emptied (a uid change from root did that already; as root of
    # a user namespace it is what keeps the chroot closed).
    header = CapHeader(0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3
    if libc.capset(ctypes.byref(header), (CapData * 2)()) != 0:
        raise OSError(ctypes.get_errno(), 'capset failed')
    if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 or libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), 'prctl failed')
    if uid >= 0 and (os.getuid() != uid or os.geteuid() != uid or os.getgid() != gid):
        raise OSError(errno.EPERM, 'could not drop privileges')
    try:
        os.chroot('/')  # must fail now: the chroot cannot be left
    except PermissionError:
        forbid_imports()
        return
    raise OSError(errno.EPERM, 'still privileged after dropping privileges')


class NoImports:
    """After the chroot, a module file would be read from inside the workspace, which the
    sandbox writes: code outside gVisor. So nothing is imported any more, whatever asks
    (an error report, a lazy import in the library)."""

    @staticmethod
    def find_spec(name, path=None, target=None):
        raise ImportError('the workspace helper imports nothing once confined (%s)' % name)


def forbid_imports():
    sys.path.clear()
    sys.path_importer_cache.clear()
    sys.meta_path.insert(0, NoImports)
    # An error that escapes is reported without the traceback module.
    sys.excepthook = lambda kind, value, tb: os.write(2, ('workspace helper: %s\n' % kind.__name__).encode())


def segments(path):
    if not isinstance(path, str) or '\0' in path:
        raise Refused('EINVAL', 'invalid path')
    parts = [p for p in path.split('/') if p]
    if any(p in ('.', '..') for p in parts):
        raise Refused('EINVAL', 'invalid path')
    return parts


def open_subdir(name, dir_fd):
    """os.open(name, DIR_FLAGS, dir_fd=dir_fd) that never goes through a symlink, even
    where the kernel does for O_DIRECTORY|O_NOFOLLOW (gVisor's follows a symlink to a
    folder then): the entry is looked at first, and the folder opened must be that very
    entry, or the entry was swapped meanwhile and is refused as a link."""
    before = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    if stat.S_ISLNK(before.st_mode):
        raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), name)
    fd = os.open(name, DIR_FLAGS, dir_fd=dir_fd)
    after = os.fstat(fd)
    if (after.st_dev, after.st_ino) != (before.st_dev, before.st_ino):
        os.close(fd)
        raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), name)
    return fd


def open_dir(parts, create=False):
    """A descriptor of the folder `parts` names, walked from the root one component at
    a time with O_NOFOLLOW; with `create`, missing folders are made on the way."""
    fd = os.open('/', DIR_FLAGS)
    try:
        for i, name in enumerate(parts):
            try:
                nxt = open_subdir(name, fd)
            except FileNotFoundError:
                if not create:
                    raise
                try:
                    os.mkdir(name, 0o755, dir_fd=fd)
                except FileExistsError:
                    pass
                nxt = open_subdir(name, fd)
            except OSError as exc:
                raise refusal(exc, '/'.join(parts[:i + 1]), fd, name)
            os.close(fd)
            fd = nxt
        return fd
    except BaseException:
        os.close(fd)
        raise


def refusal(exc, shown, dir_fd=None, name=None):
    """An OSError on a path as a Refused with a message the gateway can show. With the
    folder and name that failed, an ENOTDIR is told apart: O_DIRECTORY|O_NOFOLLOW on a
    symlink fails with ENOTDIR too."""
    code = errno.errorcode.get(exc.errno, 'EIO')
    if code in ('ENOTDIR', 'ENXIO') and dir_fd is not None:
        try:
            mode = os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode
            if stat.S_ISLNK(mode):
                code = 'ELOOP'
            elif code == 'ENXIO' and not stat.S_ISREG(mode):  # a FIFO with no reader, a socket
                return Refused('EINVAL', '"%s" is not a regular file' % shown)
        except OSError:
            pass
    if code == 'ELOOP':
        return Refused('ELOOP', '"%s" goes through a symbolic link, which the gateway does not follow' % shown)
    if code == 'ENOTDIR':
        return Refused('ENOTDIR', '"%s" is not a directory' % shown)
    return Refused(code, '%s: %s' % (os.strerror(exc.errno), shown))


def lookup(parts):
    """(descriptor of the parent folder, last name), the parent walked as in open_dir."""
    if not parts:
        raise Refused('EINVAL', 'the workspace itself')
    return open_dir(parts[:-1]), parts[-1]


def entry_type(st):
    if stat.S_ISDIR(st.st_mode):
        return 'dir'
    if stat.S_ISREG(st.st_mode):
        return 'file'
    if stat.S_ISLNK(st.st_mode):
        return 'symlink'
    return 'other'


def describe(st):
    return {'type': entry_type(st), 'size': st.st_size if stat.S_ISREG(st.st_mode) else 0,
            'mtimeMs': st.st_mtime_ns / 1e6}


def op_stat(req):
    parts = segments(req.get('path'))
    if not parts:
        return describe(os.stat('/')), None
    parent, name = lookup(parts)
    try:
        return describe(os.stat(name, dir_fd=parent, follow_symlinks=False)), None
    finally:
        os.close(parent)


def open_file(parts, flags, mode=0o644):
    """Opens a regular file by descriptor walk, O_NOFOLLOW and O_NONBLOCK (a FIFO must
    never block us); returns (fd, stat). Refuses what is not a regular file."""
    parent, name = lookup(parts)
    try:
        fd = os.open(name, flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, mode, dir_fd=parent)
    except OSError as exc:
        raise refusal(exc, '/'.join(parts), parent, name)
    finally:
        os.close(parent)
    try:
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            raise Refused('EISDIR', '"%s" is a directory' % '/'.join(parts))
        if not stat.S_ISREG(st.st_mode):
            raise Refused('EINVAL', '"%s" is not a regular file' % '/'.join(parts))
        os.set_blocking(fd, True)
        return fd, st
    except BaseException:
        os.close(fd)
        raise


def op_read(req):
    parts = segments(req.get('path'))
    fd, st = open_file(parts, os.O_RDONLY)
    try:
        offset = max(0, min(int(req.get('offset') or 0), st.st_size))
        length = max(0, min(int(req.get('length') if req.get('length') is not None else st.st_size), MAX_READ,
                            st.st_size - offset))
        data = os.pread(fd, length, offset) if length else b''
        return {'size': st.st_size}, data
    finally:
        os.close(fd)


def op_write(req, data):
    parts = segments(req.get('path'))
    if not parts:
        raise Refused('EISDIR', 'cannot write to the workspace root; give a file name')
    if len(parts) > 1:
        os.close(open_dir(parts[:-1], create=True))
    # No O_TRUNC: truncating happens below, once the descriptor is known to be a file.
    fd, _ = open_file(parts, os.O_WRONLY | os.O_CREAT | (os.O_APPEND if req.get('append') else 0))
    try:
        if not req.get('append'):
            os.ftruncate(fd, 0)
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        return {'size': os.fstat(fd).st_size}, None
    finally:
        os.close(fd)


def op_mkdirs(req):
    os.close(open_dir(segments(req.get('path')), create=True))
    return {}, None


def remove_tree(dir_fd, name, budget, depth):
    """Removes name (in dir_fd) and, for a folder, all below it, without following links."""
    budget[0] -= 1
    if budget[0] < 0:
        raise Refused('E2BIG', 'the folder holds too many entries to delete at once; delete parts of it first')
    st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    if not stat.S_ISDIR(st.st_mode):
        os.unlink(name, dir_fd=dir_fd)
        return
    if depth >= MAX_DEPTH * 4:
        raise Refused('E2BIG', 'the folder is nested too deep to delete at once; delete its deepest parts first')
    fd = open_subdir(name, dir_fd)
    try:
        with os.scandir(fd) as it:
            names = [e.name for e in it]
        for child in names:
            remove_tree(fd, child, budget, depth + 1)
    finally:
        os.close(fd)
    os.rmdir(name, dir_fd=dir_fd)


def op_remove(req):
    parts = segments(req.get('path'))
    if not parts:
        raise Refused('EINVAL', 'refusing to delete the workspace root')
    parent, name = lookup(parts)
    try:
        remove_tree(parent, name, [REMOVE_ENTRIES], 0)
    except OSError as exc:
        raise refusal(exc, '/'.join(parts))
    finally:
        os.close(parent)
    return {}, None


def op_rename(req):
    src, dst = segments(req.get('from')), segments(req.get('to'))
    if not src or not dst:
        raise Refused('EINVAL', 'cannot rename the workspace root')
    if dst[:len(src)] == src:
        raise Refused('EINVAL', 'cannot move a folder into itself')
    src_parent, src_name = lookup(src)
    try:
        if len(dst) > 1:
            os.close(open_dir(dst[:-1], create=True))
        dst_parent, dst_name = lookup(dst)
        try:
            # renameat2 with RENAME_NOREPLACE: no check-then-rename window in which the
            # sandbox could put a file at the target for the rename to overwrite.
            if LIBC.renameat2(src_parent, os.fsencode(src_name), dst_parent, os.fsencode(dst_name), RENAME_NOREPLACE) != 0:
                err = ctypes.get_errno()
                if err == errno.EEXIST:
                    raise Refused('EEXIST', '"%s" already exists' % '/'.join(dst))
                raise OSError(err, os.strerror(err))
        finally:
            os.close(dst_parent)
    except OSError as exc:
        raise refusal(exc, '/'.join(src))
    finally:
        os.close(src_parent)
    return {}, None


def op_list(req):
    """Entries under a folder, breadth first and in name order within each folder, as
    {path, type, size, mtimeMs}; only regular files and folders (symlinks, FIFOs and
    devices are not shown). Bounded by `limit` entries, `depth` levels and LIST_SECONDS;
    `stopped` says which bound cut it short."""
    parts = segments(req.get('path') or '')
    limit = max(1, min(int(req.get('limit') or MAX_LIST), MAX_LIST))
    max_depth = max(0, min(int(req.get('depth') if req.get('depth') is not None else MAX_DEPTH), MAX_DEPTH))
    recursive = bool(req.get('recursive'))
    deadline = time.monotonic() + LIST_SECONDS
    entries = []
    budget = MAX_REPLY
    stopped = None
    queue = [(parts, 0)]
    while queue:
        dir_parts, depth = queue.pop(0)
        try:
            fd = open_dir(dir_parts)
        except (Refused, OSError):
            if dir_parts is parts:
                raise
            continue  # swapped or removed meanwhile: skip it
        try:
            with os.scandir(fd) as it:
                found = sorted(it, key=lambda e: e.name)
            for entry in found:
                if len(entries) >= limit:
                    return {'entries': entries, 'stopped': 'limit'}, None
                if time.monotonic() > deadline:
                    return {'entries': entries, 'stopped': 'time'}, None
                try:
                    st = entry.stat(follow_symlinks=False)
                except OSError:
                    continue
                kind = entry_type(st)
                if kind not in ('file', 'dir'):
                    continue
                child = dir_parts + [entry.name]
                path = '/'.join(child)
                if len(os.fsencode(path)) > MAX_PATH:
                    continue  # not a path anything could open
                budget -= len(wire(path)) + 60
                if budget < 0:
                    return {'entries': entries, 'stopped': 'limit'}, None
                entries.append({'path': path, 'type': kind, 'size': st.st_size if kind == 'file' else 0,
                                'mtimeMs': st.st_mtime_ns / 1e6})
                if kind == 'dir' and recursive:
                    if depth + 1 > max_depth:
                        stopped = 'depth'
                    else:
                        queue.append((child, depth + 1))
        finally:
            os.close(fd)
    return {'entries': entries, 'stopped': stopped}, None


OPS = {'stat': op_stat, 'read': op_read, 'mkdirs': op_mkdirs, 'remove': op_remove, 'rename': op_rename,
       'list': op_list}


def read_exact(stream, n):
    data = stream.read(n)
    if data is None or len(data) != n:
        raise EOFError
    return data


def wire(value):
    """`value` as the JSON the gateway reads, UTF-8 encoded. A byte of a name that is not
    UTF-8 is, here, its lone surrogate (U+DC80-U+DCFF, surrogateescape) and goes as that
    surrogate's escape (\\udcff), which the gateway reads back as the same string and
    sends back to name the same file; every other character goes as itself."""
    text = json.dumps(value, ensure_ascii=False)
    try:
        return text.encode('utf-8')
    except UnicodeEncodeError:
        return text.translate(SURROGATE_ESCAPES).encode('utf-8')


def reply(out, header, data=None):
    if data is not None:
        header['bytes'] = len(data)
    out.write(wire(header) + b'\n')
    if data:
        out.write(data)
    out.flush()


def serve(inp, out):
    while True:
        line = inp.readline(1 << 20)
        if not line:
            return
        try:
            req = json.loads(line)
            if not isinstance(req, dict):
                raise ValueError('not an object')
        except ValueError:
            reply(out, {'ok': False, 'code': 'EPROTO', 'message': 'malformed request'})
            return  # the stream is out of step: better to end than to guess
        size = req.get('bytes') or 0
        if not isinstance(size, int) or size < 0 or size > MAX_WRITE:
            reply(out, {'ok': False, 'code': 'EPROTO', 'message': 'bad payload size'})
            return
        data = read_exact(inp, size) if size else b''
        try:
            op = req.get('op')
            if op == 'write':
                header, payload = op_write(req, data)
            elif op in OPS:
                header, payload = OPS[op](req)
            else:
                raise Refused('EINVAL', 'unknown op %r' % (op,))
            header['ok'] = True
            reply(out, header, payload)
        except Refused as exc:
            reply(out, {'ok': False, 'code': exc.code, 'message': str(exc)})
        except OSError as exc:
            reply(out, {'ok': False, 'code': errno.errorcode.get(exc.errno, 'EIO'), 'message': os.strerror(exc.errno or 5)})
        except (ValueError, TypeError) as exc:
            reply(out, {'ok': False, 'code': 'EINVAL', 'message': 'invalid request: %s' % exc})
        except MemoryError:
            reply(out, {'ok': False, 'code': 'ENOMEM', 'message': 'out of memory'})
        except Exception as exc:  # never a traceback (it would import): a clear error, and carry on
            reply(out, {'ok': False, 'code': 'EIO', 'message': type(exc).__name__})


def main():
    root, uid, gid = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    inp = os.fdopen(0, 'rb')
    out = os.fdopen(1, 'wb')
    try:
        confine(root, uid, gid)
    except OSError as exc:
        reply(out, {'ok': False, 'code': 'ECONFINE', 'message': 'could not confine the workspace helper: %s' % exc})
        sys.exit(1)
    reply(out, {'ok': True, 'ready': True})
    try:
        serve(inp, out)
    except (EOFError, BrokenPipeError):
        pass


if __name__ == '__main__':
    main()
