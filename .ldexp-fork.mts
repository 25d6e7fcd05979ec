import { createHarness } from './src/testing/harness.js';
for (const image of (process.env.IMAGES ?? 'sandgate/sandbox:cab543ab70a20557,sandgate/sandbox:latest').split(',')) {
  const h = await createHarness({ env: { SANDGATE_SANDBOX_IMAGE: image, SANDGATE_SANDBOX_MEMORY_MB: '512', SANDGATE_SANDBOX_TMP_MB: '32', SANDGATE_WORKSPACE_MB: '64', SANDGATE_OUTPUT_LIMIT_KB: '16', SANDGATE_EXEC_TIMEOUT_SEC: '20' } });
  const m = h.user('mallory');
  await h.manager.execute(m, { language: 'bash', code: 'echo mine > precious.txt' });
  for (let i = 0; i < 3; i++) {
    const r = await h.manager.execute(m, { language: 'python', code: 'import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass', timeoutSec: 6 });
    const t0 = Date.now();
    const next = await h.manager.execute(m, { language: 'bash', code: 'cat precious.txt; ps -e --no-headers | wc -l' });
    console.log(image.slice(-8), 'attack:', r.killed, r.restarted, r.notice, '| next:', JSON.stringify(next.stdout), next.exitCode, Date.now() - t0, 'ms', next.notice, next.stderr.slice(0, 80));
  }
  await h.close();
}
