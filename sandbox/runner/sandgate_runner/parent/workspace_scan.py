"""The workspace before and after each execution, and what changed: a bounded walk
(entries, depth, time) that follows no symlink and opens every folder relative to its
parent, so code that swaps a folder for a link mid-walk sends it nowhere."""
import os
import time

from .settings import SCAN_LIMIT, SCAN_MAX_DEPTH, SCAN_MAX_SECONDS


class Scan:
    """A workspace snapshot: regular files as {relative path: (size, mtime_ns)}, and why
    the scan stopped early, if it did ('entries', 'time'; 'depth' when it skipped folders
    nested too deep, which it does the same way every time)."""
    __slots__ = ('files', 'stopped', 'depth_cut')

    def __init__(self):
        self.files = {}
        self.stopped = None
        self.depth_cut = False

    @property
    def partial(self):
        """Whether files may be missing that a full scan would have found at random, so
        that deletions cannot be told apart (a depth cut always skips the same folders)."""
        return self.stopped is not None


_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# Where package managers keep what they install (pip's user site, Deno's and others'
# caches): thousands of files no run means to report, which would otherwise use up the
# scan's entries and hide the run's own changes.
PACKAGE_DIRS = frozenset(('.local/lib', '.cache'))


def snapshot(root, limit=SCAN_LIMIT, max_depth=SCAN_MAX_DEPTH, max_seconds=SCAN_MAX_SECONDS):
    """Scans the regular files under root, bounded by entries, folder depth and time.

    Folders are opened relative to their parent's descriptor (never by path, never
    through a symlink), so a deep tree costs one open per folder instead of a path walk
    per entry, and a folder swapped for a symlink is skipped. Directories are read in
    name order, so a scan capped by entries always covers the same prefix."""
    scan = Scan()
    deadline = time.monotonic() + max_seconds
    seen = [0]

    def walk(dir_fd, rel, depth):
        try:
            with os.scandir(dir_fd) as it:
                entries = sorted(it, key=lambda e: e.name)
        except OSError:
            return
        for entry in entries:
            seen[0] += 1
            if seen[0] > limit:
                scan.stopped = 'entries'
                return
            if not seen[0] & 255 and time.monotonic() > deadline:
                scan.stopped = 'time'
                return
            path = rel + '/' + entry.name if rel else entry.name
            try:
                if entry.is_dir(follow_symlinks=False):
                    if path in PACKAGE_DIRS:
                        continue
                    if depth >= max_depth:
                        scan.depth_cut = True
                        continue
                    fd = os.open(entry.name, _DIR_FLAGS, dir_fd=dir_fd)
                    try:
                        walk(fd, path, depth + 1)
                    finally:
                        os.close(fd)
                    if scan.stopped:
                        return
                elif entry.is_file(follow_symlinks=False):
                    st = entry.stat(follow_symlinks=False)
                    scan.files[path] = (st.st_size, st.st_mtime_ns)
            except OSError:
                continue

    try:
        top = os.open(root, _DIR_FLAGS)
    except OSError:
        return scan
    try:
        walk(top, '', 0)
    finally:
        os.close(top)
    return scan


def scan_notice(before, after):
    """What the result says about scans that stopped early, or None."""
    reasons = []
    for stopped in ('entries', 'time'):
        if stopped in (before.stopped, after.stopped):
            reasons.append({'entries': 'it holds more than %d entries' % SCAN_LIMIT,
                            'time': 'scanning it took more than %g s' % SCAN_MAX_SECONDS}[stopped])
    if reasons:
        return ('The workspace scan stopped early (%s): file changes are listed for the part it covered, '
                'and deletions are not listed.' % ' and '.join(reasons))
    if before.depth_cut or after.depth_cut:
        return ('Folders nested more than %d levels deep in /workspace were not scanned: changes inside them '
                'are not listed.' % SCAN_MAX_DEPTH)
    return None


def file_changes(before, after, partial):
    """FileChange list; deletions are left out when a scan was partial (they could be
    files the capped scan merely did not reach)."""
    changes = []
    for path, (size, mtime) in after.items():
        old = before.get(path)
        if old is None:
            changes.append({'path': path, 'size': size, 'change': 'created'})
        elif old != (size, mtime):
            changes.append({'path': path, 'size': size, 'change': 'modified'})
    if not partial:
        for path in before.keys() - after.keys():
            changes.append({'path': path, 'size': 0, 'change': 'deleted'})
    changes.sort(key=lambda c: c['path'])
    return changes
