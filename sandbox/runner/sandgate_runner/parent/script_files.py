"""The files in the runner's state folder that executions' code is written to (a bash
script, a TypeScript or JavaScript file, the bash shell's prelude): made at start with a
page of /tmp each and written over in place, so that code that fills /tmp cannot keep
the next execution from running."""
import os


RESERVED_BYTES = 4096


def reserve_files(state_dir):
    """Makes the files every later execution writes its code to, each holding a page of
    /tmp from the start: code that fills /tmp cannot keep the next one from running."""
    for name, mode in (('exec.sh', 0o644), ('exec.ts', 0o644), ('exec.js', 0o644), ('bash-prelude.sh', 0o644),
                       ('bash-names', 0o666)):
        path = os.path.join(state_dir, name)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, mode)
        try:
            if os.fstat(fd).st_size < RESERVED_BYTES:
                os.pwrite(fd, b'\n' * RESERVED_BYTES, 0)
        finally:
            os.close(fd)
        os.chmod(path, mode)  # whatever the umask


def write_in_place(path, code):
    """Writes `code` over the file at `path`, padded with newlines to its old length, so
    that the /tmp space it held is used again (code that filled /tmp must not stop the next
    execution; a much longer old file is cut). Returns `path`."""
    data = code.encode('utf-8', 'surrogatepass') + b'\n'
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        size = os.fstat(fd).st_size
        if size > max(len(data) + 65536, RESERVED_BYTES):
            os.ftruncate(fd, max(len(data), RESERVED_BYTES))
            size = max(len(data), RESERVED_BYTES)
        if size > len(data):
            data += b'\n' * (size - len(data))
        view, offset = memoryview(data), 0
        while offset < len(data):
            offset += os.pwrite(fd, view[offset:], offset)
    finally:
        os.close(fd)
    return path
