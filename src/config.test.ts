import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { ConfigError, loadConfig, readEnv, SETTINGS } from './config.js';

describe('config', () => {
  it('has safe defaults', () => {
    const { config, warnings } = loadConfig({});
    expect(config.host).toBe('127.0.0.1');
    expect(config.sandboxRuntime).toBe('runsc');
    expect(config.unsafeAllowNonGvisor).toBe(false);
    expect(config.workspaceBackend).toBe('loop');
    expect(config.publicUrl).toBe('http://127.0.0.1:8787');
    expect(path.isAbsolute(config.dataDir)).toBe(true);
    expect(warnings).toEqual([]);
  });

  it('names the bad setting and how to fix it', () => {
    expect(() => loadConfig({ SANDGATE_PORT: 'eighty' })).toThrow(/SANDGATE_PORT="eighty" is invalid/);
    expect(() => loadConfig({ SANDGATE_SANDBOX_PIDS_LIMIT: '10' })).toThrow(/SANDGATE_SANDBOX_PIDS_LIMIT/);
    expect(() => loadConfig({ SANDGATE_DEFAULT_PERMISSIONS: '[1]' })).toThrow(/SANDGATE_DEFAULT_PERMISSIONS is not a JSON object/);
  });

  it('refuses runc unless explicitly allowed, then warns loudly', () => {
    expect(() => loadConfig({ SANDGATE_SANDBOX_RUNTIME: 'runc' })).toThrow(/SANDGATE_UNSAFE_ALLOW_NON_GVISOR=true/);
    const { warnings } = loadConfig({ SANDGATE_SANDBOX_RUNTIME: 'runc', SANDGATE_UNSAFE_ALLOW_NON_GVISOR: 'true' });
    expect(warnings.join('\n')).toMatch(/UNSAFE/);
  });

  it('rejects conflicting settings naming both', () => {
    const err = (() => {
      try {
        loadConfig({ SANDGATE_EXEC_TIMEOUT_SEC: '700', SANDGATE_EXEC_MAX_TIMEOUT_SEC: '600' });
      } catch (e) {
        return e as Error;
      }
    })();
    expect(err).toBeInstanceOf(ConfigError);
    expect(err!.message).toMatch(/SANDGATE_EXEC_TIMEOUT_SEC=700 exceeds SANDGATE_EXEC_MAX_TIMEOUT_SEC=600/);
    expect(() => loadConfig({ SANDGATE_HOST: '0.0.0.0' })).toThrow(/SANDGATE_PUBLIC_URL/);
    expect(loadConfig({ SANDGATE_HOST: '0.0.0.0', SANDGATE_PUBLIC_URL: 'https://gate.example.com' }).config.publicUrl).toBe('https://gate.example.com');
  });

  it('reads .env below the environment', () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sandgate-env-'));
    const file = path.join(dir, '.env');
    fs.writeFileSync(file, 'SANDGATE_PORT=9999\nSANDGATE_LOG_LEVEL=debug\n');
    const env = readEnv({ SANDGATE_LOG_LEVEL: 'warn' }, file);
    const { config } = loadConfig(env);
    expect(config.port).toBe(9999);
    expect(config.logLevel).toBe('warn');
  });

  it('every setting is documented in the README table, and only those', () => {
    const readme = fs.readFileSync(new URL('../README.md', import.meta.url), 'utf8');
    const documented = [...readme.matchAll(/^\| `(SANDGATE_[A-Z0-9_]+)` \|/gm)].map((m) => m[1]);
    expect(documented.sort()).toEqual(SETTINGS.map((s) => s.env).sort());
    for (const s of SETTINGS) {
      const row = readme.split('\n').find((l) => l.startsWith(`| \`${s.env}\` |`))!;
      expect(row, s.env).toContain(s.default === '' ? '(empty)' : `\`${s.default}\``);
    }
  });
});
