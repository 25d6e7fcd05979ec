import { spawn } from 'node:child_process';
import { describe, expect, it } from 'vitest';
import { until } from '../../test/support/until.js';

/** The fixture app in a process of its own: what it printed, and how it ended. */
function startStrayApp(env: Record<string, string> = {}) {
  const child = spawn(process.execPath, ['--import', 'tsx', 'test/fixtures/stray-rejection-app.ts'], {
    env: { PATH: process.env.PATH!, ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  let err = '';
  child.stdout.on('data', (d) => (out += d));
  child.stderr.on('data', (d) => (err += d));
  let exitCode: number | null | undefined;
  const exited = new Promise<number | null>((r) =>
    child.on('exit', (code) => {
      exitCode = code;
      r(code);
    }),
  );
  return {
    child,
    exited,
    exitCode: () => exitCode,
    stderr: () => err,
    async ready() {
      await until(() => out.includes('\n') || exitCode !== undefined, 30_000);
      return JSON.parse(out.split('\n')[0]!) as { port: number; token: string; userId: number };
    },
    logs: () =>
      out
        .split('\n')
        .slice(1)
        .filter((l) => l.startsWith('{'))
        .map((l) => JSON.parse(l) as Record<string, unknown>),
  };
}

const stray = (port: number, token: string) =>
  fetch(`http://127.0.0.1:${port}/api/stray?secret=abc`, { method: 'POST', headers: { authorization: `Bearer ${token}`, 'content-type': 'text/plain' }, body: 'x'.repeat(100_000) });

describe('a promise rejected with nobody to handle it', () => {
  it('is logged at error level with the request it came from, and the process keeps serving', async () => {
    const app = startStrayApp();
    try {
      const { port, token, userId } = await app.ready();
      for (let i = 0; i < 3; i++) expect((await stray(port, token)).status).toBe(200);
      await until(() => app.logs().filter((l) => l.level === 50).length >= 3, 10_000);
      expect(app.exitCode()).toBeUndefined();
      expect((await fetch(`http://127.0.0.1:${port}/healthz`)).status).toBe(200);
      const logged = app.logs().filter((l) => l.level === 50);
      expect(logged).toHaveLength(3);
      for (const line of logged) {
        expect(line.msg).toMatch(/rejected with nobody to handle it/);
        expect(line.err).toMatchObject({ message: 'nobody waits for this' });
        // The request as it came in (its query left out: it can carry secrets), and its user.
        expect(line.req).toEqual({ method: 'POST', path: '/api/stray', userId });
      }
      // Node's own report (and exit) never happened.
      expect(app.stderr()).toBe('');
    } finally {
      app.child.kill('SIGTERM');
      await app.exited;
    }
  });

  it('ends the process when nothing guards it (what the guard prevents)', async () => {
    const app = startStrayApp({ SANDGATE_TEST_GUARD: '0' });
    try {
      const { port, token } = await app.ready();
      await stray(port, token).catch(() => undefined);
      expect(await app.exited).toBe(1);
      expect(app.stderr()).toContain('nobody waits for this');
    } finally {
      app.child.kill('SIGKILL');
    }
  });
});
