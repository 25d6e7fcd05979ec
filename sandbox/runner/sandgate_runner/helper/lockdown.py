"""File-system narrowing for one execution: the exec request's `fs` field (PROTOCOL.md).

The runner starts this script under util-linux's unshare(1):

  unshare --user --map-root-user --mount --pid --fork --mount-proc --kill-child \
      python3 -I -S .../sandgate_runner/helper/lockdown.py serve STATUS_FD

so it runs as root (= the sandbox's uid) of a new user namespace that owns a new mount
namespace and a new pid namespace, as pid 1 of the latter with its own /proc. It reads
one request line from stdin,

  {"argv", "env", "cwd", "uid", "gid", "readOnly", "hidden", "protect"}

and then

  1. bind-mounts every `readOnly` and `protect` path onto itself and remounts it
     read-only (mounts below it too), and covers every `hidden` path with an empty,
     read-only tmpfs (a file with /dev/null);
  2. enters one more, nested user namespace as uid/gid `uid`/`gid` again, without any
     capability over those mounts;
  3. installs a seccomp filter that makes every system call that could change or
     leave the mount table fail: mount, umount2, pivot_root, chroot, unshare, setns,
     the new mount API (open_tree, move_mount, fsopen, fsconfig, fsmount, fspick,
     mount_setattr), open_by_handle_at and clone with any CLONE_NEW* flag (EPERM),
     clone3 (ENOSYS, so glibc falls back to clone, whose flags the filter can read);
     ptrace, process_vm_readv/writev and pidfd_getfd fail too. The filter is inherited
     across fork and exec and cannot be removed;
  4. writes "go" on STATUS_FD (or "error: <why>" and exits 126) and execs argv.

The seccomp filter matters under gVisor, which does not enforce MNT_LOCK_READONLY:
without it, code could make a user+mount namespace of its own and remount /workspace
read-write there. As pid 1 of its pid namespace, the executed program takes every
process it leaves behind with it when it ends (even one that called setsid), and it
sees no process outside.

Everything slow (interpreter start, ctypes) happens before the request is read, so the
runner can keep one helper started ahead of time. x86_64 only (the image's
architecture); elsewhere the request is refused, never run without its narrowing.

From a shell: python3 lockdown.py '{"readOnly": ["/workspace"], "hidden": ["/skills"]}' CMD ARG...
"""
import ctypes
import errno
import os
import struct
import sys

CLONE_NEWNS = 0x00020000
CLONE_NEWCGROUP = 0x02000000
CLONE_NEWUTS = 0x04000000
CLONE_NEWIPC = 0x08000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000
CLONE_NEW_ANY = CLONE_NEWNS | CLONE_NEWCGROUP | CLONE_NEWUTS | CLONE_NEWIPC | CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNET

MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_NOATIME, MS_NODIRATIME, MS_BIND, MS_REC = 32, 1024, 2048, 4096, 16384
MS_RELATIME = 1 << 21
# statvfs f_flag bits -> mount flags that a remount must keep (a mount inherited from a
# more privileged namespace has them locked: dropping one fails with EPERM).
ST_TO_MS = ((os.ST_NOSUID, MS_NOSUID), (os.ST_NODEV, MS_NODEV), (os.ST_NOEXEC, MS_NOEXEC),
            (os.ST_NOATIME, MS_NOATIME), (os.ST_NODIRATIME, MS_NODIRATIME), (os.ST_RELATIME, MS_RELATIME))

PR_SET_NO_NEW_PRIVS = 38
PR_SET_SECCOMP = 22
SECCOMP_MODE_FILTER = 2

# BPF
BPF_LD_W_ABS = 0x20       # BPF_LD | BPF_W | BPF_ABS
BPF_JEQ_K = 0x15          # BPF_JMP | BPF_JEQ | BPF_K
BPF_JGE_K = 0x35          # BPF_JMP | BPF_JGE | BPF_K
BPF_JSET_K = 0x45         # BPF_JMP | BPF_JSET | BPF_K
BPF_RET_K = 0x06          # BPF_RET | BPF_K
SECCOMP_RET_KILL_PROCESS = 0x80000000
SECCOMP_RET_ERRNO = 0x00050000
SECCOMP_RET_ALLOW = 0x7FFF0000
AUDIT_ARCH_X86_64 = 0xC000003E
X32_SYSCALL_BIT = 0x40000000
# struct seccomp_data: int nr; __u32 arch; __u64 instruction_pointer; __u64 args[6]
OFF_NR, OFF_ARCH, OFF_ARG0_LO = 0, 4, 16

# x86_64 system call numbers
NR_CLONE, NR_CLONE3 = 56, 435
DENIED = {
    'ptrace': 101, 'pivot_root': 155, 'chroot': 161, 'mount': 165, 'umount2': 166,
    'unshare': 272, 'open_by_handle_at': 304, 'setns': 308, 'process_vm_readv': 310,
    'process_vm_writev': 311, 'open_tree': 428, 'move_mount': 429, 'fsopen': 430,
    'fsconfig': 431, 'fsmount': 432, 'fspick': 433, 'pidfd_getfd': 438, 'mount_setattr': 442,
}

UNSHARE_ARGS = ['--user', '--map-root-user', '--mount', '--pid', '--fork', '--mount-proc', '--kill-child']


class LockdownError(Exception):
    pass


def seccomp_program():
    """The filter as packed struct sock_filter entries (x86_64), and their number."""
    prog = []

    def stmt(code, k):
        prog.append((code, 0, 0, k))

    def jump(code, k, jt, jf):
        prog.append((code, jt, jf, k))

    deny = SECCOMP_RET_ERRNO | errno.EPERM
    stmt(BPF_LD_W_ABS, OFF_ARCH)
    jump(BPF_JEQ_K, AUDIT_ARCH_X86_64, 1, 0)
    stmt(BPF_RET_K, SECCOMP_RET_KILL_PROCESS)             # another ABI (i386): kill
    stmt(BPF_LD_W_ABS, OFF_NR)
    jump(BPF_JGE_K, X32_SYSCALL_BIT, 0, 1)
    stmt(BPF_RET_K, SECCOMP_RET_ERRNO | errno.ENOSYS)     # the x32 ABI: not there
    jump(BPF_JEQ_K, NR_CLONE3, 0, 1)
    stmt(BPF_RET_K, SECCOMP_RET_ERRNO | errno.ENOSYS)     # glibc then uses clone
    jump(BPF_JEQ_K, NR_CLONE, 0, 4)
    stmt(BPF_LD_W_ABS, OFF_ARG0_LO)                       # clone's flags (low 32 bits)
    jump(BPF_JSET_K, CLONE_NEW_ANY, 0, 1)
    stmt(BPF_RET_K, deny)
    stmt(BPF_RET_K, SECCOMP_RET_ALLOW)
    for nr in sorted(DENIED.values()):
        jump(BPF_JEQ_K, nr, 0, 1)
        stmt(BPF_RET_K, deny)
    stmt(BPF_RET_K, SECCOMP_RET_ALLOW)
    return b''.join(struct.pack('HBBI', *ins) for ins in prog), len(prog)


class SockFprog(ctypes.Structure):
    _fields_ = [('len', ctypes.c_ushort), ('filter', ctypes.c_void_p)]


def _clean(path):
    if not isinstance(path, str) or not path.startswith('/') or '\0' in path:
        raise LockdownError('not an absolute path: %r' % (path,))
    return os.path.normpath(path)


def mount_points():
    """Mount points from /proc/self/mountinfo, in mount order."""
    points = []
    try:
        with open('/proc/self/mountinfo', 'rb') as f:
            for line in f:
                fields = line.split(b' ')
                if len(fields) > 4:
                    points.append(fields[4].decode('unicode_escape').encode('latin-1'))
    except OSError:
        pass
    return points


class Libc:
    def __init__(self):
        libc = ctypes.CDLL(None, use_errno=True)
        self.unshare = libc.unshare
        self.unshare.argtypes = [ctypes.c_int]
        self.mount = libc.mount
        self.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p]
        self.prctl = libc.prctl
        self.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_void_p, ctypes.c_ulong, ctypes.c_ulong]


class Lockdown:
    """Narrows the mount namespace this process is root of, then confines the process.
    Call narrow() and confine() in that order, then exec."""

    def __init__(self, read_only=(), hidden=(), protect=(), cwd='/', uid=None, gid=None, libc=None):
        machine = os.uname().machine
        if machine != 'x86_64':
            raise LockdownError('narrowed permissions need x86_64, this is %s' % machine)
        hidden = [_clean(p) for p in hidden]
        if '/' in hidden:
            raise LockdownError('"/" cannot be hidden')
        self.uid = os.getuid() if uid is None else uid
        self.gid = os.getgid() if gid is None else gid
        self.cwd = os.fsencode(cwd)
        points = mount_points()
        self.read_only = []
        for p in [_clean(p) for p in read_only] + [_clean(p) for p in protect]:
            if not os.path.lexists(p):
                continue
            b = os.fsencode(p)
            prefix = b.rstrip(b'/') + b'/'
            for m in [b] + [m for m in points if m.startswith(prefix)]:
                # /proc stays as it is (the nested namespace's uid_map is written there).
                if m not in self.read_only and m != b'/proc' and not m.startswith(b'/proc/'):
                    self.read_only.append(m)
        self.hidden = [(os.fsencode(p), os.path.isdir(p)) for p in hidden if os.path.lexists(p)]
        self.libc = libc or Libc()

    def _check(self, ret, what):
        if ret != 0:
            raise LockdownError('%s: %s' % (what, os.strerror(ctypes.get_errno())))

    def _mount(self, source, target, fstype, flags, data, what):
        self._check(self.libc.mount(source, target, fstype, flags, data), '%s %s' % (what, os.fsdecode(target)))

    def _remount_ro(self, path):
        try:
            st = os.statvfs(path)
        except OSError as exc:
            raise LockdownError('%s: %s' % (os.fsdecode(path), exc.strerror))
        keep = 0
        for st_flag, ms_flag in ST_TO_MS:
            if st.f_flag & st_flag:
                keep |= ms_flag
        self._mount(None, path, None, MS_REMOUNT | MS_BIND | MS_RDONLY | keep, None, 'read-only')

    def narrow(self):
        """Read-only and hidden paths (needs CAP_SYS_ADMIN over the mount namespace)."""
        for path in self.read_only:
            if path != b'/':  # "/" is a mount point already (binding it would look like a chroot)
                self._mount(path, path, None, MS_BIND | MS_REC, None, 'bind')
            self._remount_ro(path)
        for path, is_dir in self.hidden:
            if is_dir:
                self._mount(b'none', path, b'tmpfs', MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC,
                            b'size=4k,mode=0755', 'hide')
            else:
                self._mount(b'/dev/null', path, None, MS_BIND, None, 'hide')
                self._remount_ro(path)

    def confine(self):
        """The nested user namespace and the seccomp filter; the cwd is looked up again
        (it may lie under a path that is now covered)."""
        self._check(self.libc.unshare(CLONE_NEWUSER), 'unshare(nested user namespace)')
        try:
            write_file('/proc/self/setgroups', b'deny')
        except FileNotFoundError:
            pass  # gVisor has no such file (and lets an unprivileged gid_map be written)
        write_file('/proc/self/uid_map', b'%d 0 1' % self.uid)
        write_file('/proc/self/gid_map', b'%d 0 1' % self.gid)
        os.chdir(self.cwd)
        self._check(self.libc.prctl(PR_SET_NO_NEW_PRIVS, 1, None, 0, 0), 'no_new_privs')
        code, n = seccomp_program()
        buf = ctypes.create_string_buffer(code, len(code))
        prog = SockFprog(n, ctypes.addressof(buf))
        self._check(self.libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.addressof(prog), 0, 0), 'seccomp')


def write_file(path, data):
    fd = os.open(path, os.O_WRONLY)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)


def enter(req, libc=None):
    """Steps 1-3 for a request; raises LockdownError (or OSError)."""
    lock = Lockdown(req.get('readOnly') or (), req.get('hidden') or (), req.get('protect') or (),
                    req.get('cwd') or '/', req.get('uid'), req.get('gid'), libc)
    lock.narrow()
    lock.confine()


# The request on the helper's stdin: "<length>\n", then `length` bytes of NUL-separated
# strings: for each field its name, the number of values and the values. (Not JSON: json
# and the re module it imports would double the helper's start-up time under gVisor.)
LIST_FIELDS = ('argv', 'env', 'readOnly', 'hidden', 'protect')
INT_FIELDS = ('uid', 'gid')


def encode_request(req):
    parts = []
    for key, value in req.items():
        values = value if key in LIST_FIELDS else [str(value)]
        parts += [key, str(len(values))] + list(values)
    body = '\0'.join(parts).encode('utf-8', 'surrogateescape')
    return b'%d\n' % len(body) + body


def decode_request(stream):
    size = int(stream.readline())
    parts = stream.read(size).decode('utf-8', 'surrogateescape').split('\0')
    req, i = {}, 0
    while i < len(parts):
        key, n = parts[i], int(parts[i + 1])
        values = parts[i + 2:i + 2 + n]
        i += 2 + n
        req[key] = values if key in LIST_FIELDS else int(values[0]) if key in INT_FIELDS else values[0]
    return req


def serve(status_fd):
    """The runner's helper: one request on stdin, answer on status_fd, then exec."""
    os.set_inheritable(status_fd, False)
    libc = Libc()  # before the request: the runner may have started us ahead of time
    status = os.fdopen(status_fd, 'wb', buffering=0)
    try:
        req = decode_request(sys.stdin.buffer)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.close(null)
        enter(req, libc)
        argv = req['argv']
        env = dict(item.split('=', 1) for item in req['env'])
    except (LockdownError, OSError, ValueError, KeyError, IndexError) as exc:
        status.write(('error: %s\n' % (exc,)).encode('utf-8', 'replace'))
        return 126
    status.write(b'go\n')
    status.close()
    try:
        os.execve(argv[0], argv, env)
    except OSError as exc:
        sys.stderr.write('%s: %s\n' % (argv[0], exc.strerror))
        return 127


def main(argv):
    if len(argv) == 3 and argv[1] == 'serve':
        return serve(int(argv[2]))
    import json
    if len(argv) >= 4 and argv[1] == 'inner':
        try:
            enter(dict(json.loads(argv[2]), cwd=os.getcwd()))
        except (LockdownError, OSError) as exc:
            sys.stderr.write('lockdown: %s\n' % exc)
            return 126
        try:
            os.execvp(argv[3], argv[3:])
        except OSError as exc:
            sys.stderr.write('lockdown: %s: %s\n' % (argv[3], exc.strerror))
            return 127
    if len(argv) < 3 or argv[1] in ('serve', 'inner'):
        sys.stderr.write('usage: lockdown.py \'{"readOnly": [...], "hidden": [...]}\' CMD [ARG...]\n')
        return 2
    spec = dict(json.loads(argv[1]), uid=os.getuid(), gid=os.getgid())
    unshare = os.environ.get('SANDGATE_UNSHARE') or 'unshare'
    try:
        os.execvp(unshare, [unshare] + UNSHARE_ARGS + [sys.executable, '-I', '-S', os.path.abspath(__file__),
                                                       'inner', json.dumps(spec)] + argv[2:])
    except OSError as exc:
        sys.stderr.write('lockdown: %s: %s\n' % (unshare, exc.strerror))
        return 127


if __name__ == '__main__':
    sys.exit(main(sys.argv))
