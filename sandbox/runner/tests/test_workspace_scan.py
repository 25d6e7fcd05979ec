"""The workspace before and after every execution (parent/workspace_scan.py): the file
changes a `done` lists, and a walk bounded in entries, depth and time that follows no
symlink."""
import os
import shutil
import tempfile
import unittest

from harness import RunnerCase


class WorkspaceChangesTest(RunnerCase):
    def test_files_changed(self):
        with open(os.path.join(self.r.ws, 'old.txt'), 'w') as f:
            f.write('old')
        with open(os.path.join(self.r.ws, 'keep.txt'), 'w') as f:
            f.write('same')
        os.symlink('/etc', os.path.join(self.r.ws, 'link'))
        _, _, done = self.r.run(
            'import os\nos.makedirs("sub/deep")\nopen("sub/deep/new.txt", "w").write("hello")\n'
            'open("keep2.txt", "w").write("x")\nos.remove("old.txt")\nos.symlink("/usr", "link2")')
        self.assertEqual(done['files'], [
            {'path': 'keep2.txt', 'size': 1, 'change': 'created'},
            {'path': 'old.txt', 'size': 0, 'change': 'deleted'},
            {'path': 'sub/deep/new.txt', 'size': 5, 'change': 'created'},
        ])
        _, _, done = self.r.run('echo more >> keep2.txt', language='bash')
        self.assertEqual(done['files'], [{'path': 'keep2.txt', 'size': 6, 'change': 'modified'}])

    def test_installed_packages_are_not_file_changes(self):
        # What pip puts in ~/.local/lib (HOME is the workspace) and caches in ~/.cache are
        # not reported, and do not count against the scan's bounds; ~/.local/bin and the
        # run's own files are.
        _, _, done = self.r.run(
            'import os\nfor d in (".local/lib/python3/site-packages/pkg", ".cache/deno/npm", ".local/bin"):\n'
            '    os.makedirs(d)\n'
            'open(".local/lib/python3/site-packages/pkg/__init__.py", "w").write("x")\n'
            'open(".cache/deno/npm/index.js", "w").write("x")\n'
            'open(".local/bin/tool", "w").write("x")\nopen("mine.txt", "w").write("x")')
        self.assertEqual(done['files'], [
            {'path': '.local/bin/tool', 'size': 1, 'change': 'created'},
            {'path': 'mine.txt', 'size': 1, 'change': 'created'},
        ])

    def test_deep_workspace_scan_is_bounded(self):
        # Folders nested far deeper than the scan goes: the run is reported, changes deep
        # down are not, and the result says why.
        deep = self.r.ws
        for i in range(200):
            deep = os.path.join(deep, 'd')
        os.makedirs(deep)
        _, _, done = self.r.run('import os\nopen("top.txt", "w").write("1")\nopen(%r + "/bottom.txt", "w").write("2")' % deep)
        self.assertEqual(done['files'], [{'path': 'top.txt', 'size': 1, 'change': 'created'}])
        self.assertIn('more than 64 levels deep', done['notice'])


class ScanTest(unittest.TestCase):
    """The workspace snapshot before and after every execution."""

    def setUp(self):
        from sandgate_runner.parent import workspace_scan
        self.files = workspace_scan
        self.dir = tempfile.mkdtemp(prefix='sandgate-scan-')
        self.addCleanup(shutil.rmtree, self.dir)

    def write(self, rel, data='x'):
        path = os.path.join(self.dir, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, 'w') as f:
            f.write(data)

    def test_depth_bound(self):
        self.write('a/b/c/shallow.txt')
        self.write('/'.join(['d'] * 100) + '/deep.txt')
        scan = self.files.snapshot(self.dir, max_depth=10)
        self.assertIn('a/b/c/shallow.txt', scan.files)
        self.assertFalse(any(p.endswith('deep.txt') for p in scan.files))
        self.assertTrue(scan.depth_cut)
        self.assertFalse(scan.partial)  # a depth cut skips the same folders every time

    def test_entry_and_time_bounds(self):
        for i in range(600):
            self.write('many/f%03d' % i)
        scan = self.files.snapshot(self.dir, limit=100)
        self.assertEqual((scan.stopped, len(scan.files)), ('entries', 99))
        self.assertEqual(sorted(scan.files), ['many/f%03d' % i for i in range(99)])  # always the same prefix
        scan = self.files.snapshot(self.dir, max_seconds=0)
        self.assertEqual(scan.stopped, 'time')
        self.assertTrue(scan.partial)
        self.assertIn('took more than', self.files.scan_notice(scan, scan))

    def test_symlinks_are_not_followed(self):
        self.write('real/file.txt')
        outside = tempfile.mkdtemp(prefix='sandgate-outside-')
        self.addCleanup(shutil.rmtree, outside)
        with open(os.path.join(outside, 'secret.txt'), 'w') as f:
            f.write('s')
        os.symlink(outside, os.path.join(self.dir, 'link'))
        os.symlink(os.path.join(outside, 'secret.txt'), os.path.join(self.dir, 'file-link'))
        self.assertEqual(sorted(self.files.snapshot(self.dir).files), ['real/file.txt'])


if __name__ == '__main__':
    unittest.main()
