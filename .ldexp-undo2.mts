import { createHarness } from './src/testing/harness.js';
const h = await createHarness({});
const o = h.user('u');
const syscalls = [
  'import ctypes, sys',
  'libc = ctypes.CDLL(None, use_errno=True)',
  'calls = [(165, b"/workspace", b"/workspace", None, ctypes.c_ulong(32 | 4096), None), (166, b"/skills", 2),',
  '         (272, 0x10000000 | 0x20000), (56, ctypes.c_ulong(0x10000000 | 17), None, None, None, None),',
  '         (308, 0, 0), (428, -100, b"/workspace", 1), (430, b"tmpfs", 0), (442, -100, b"/workspace", 0, None, 0),',
  '         (155, b"/tmp", b"/tmp"), (161, b"/tmp",)]',
  'for c in calls: print(c[0], libc.syscall(*c), ctypes.get_errno())',
].join('\n');
await h.manager.execute(o, { language: 'bash', code: `cat > /tmp/undo-syscalls.py <<'EOF'\n${syscalls}\nEOF` });
for (let i = 0; i < 2; i++) {
const r = await h.manager.execute(o, { language: 'bash', code: 'python3 /tmp/undo-syscalls.py; echo rc=$?; grep Seccomp /proc/self/status; cat /proc/self/uid_map', permissions: { write: false, read: ['/workspace'] } });
console.log(r.stdout, r.stderr, r.notice);
}
await h.close();
