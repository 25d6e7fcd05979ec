/**
 * The gateway's keys: 32 bytes each, from a setting (base64 or hex) or from a file in
 * the data directory, created on first start with mode 0600 in a 0700 directory. The
 * same rules for every key (the PII vault's `pii.key`, the upstream credentials'
 * `upstream.key`): a malformed key, or a key file others can read, stops the gateway
 * with what to do instead of being used. Losing a key makes what it sealed unreadable.
 */
import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { KeyFileError } from '../errors.js';

export const KEY_BYTES = 32;

const HEX_KEY = /^[0-9a-fA-F]{64}$/;
const BASE64_KEY = /^[A-Za-z0-9+/_-]{43}=?$/;

function decodeKey(text: string, source: string): Buffer {
  const t = text.trim();
  if (HEX_KEY.test(t)) return Buffer.from(t, 'hex');
  if (BASE64_KEY.test(t)) return Buffer.from(t.replaceAll('-', '+').replaceAll('_', '/'), 'base64');
  throw new KeyFileError(`${source} is not a ${KEY_BYTES}-byte key in base64 or hex: restore it from a backup (what it sealed cannot be read without it), or generate one with: openssl rand -base64 ${KEY_BYTES}`);
}

export interface KeyOptions {
  /** A key given in a setting (base64 or hex), which wins over the file. */
  configured?: string;
  /** The setting's name, for messages. */
  setting?: string;
}

/**
 * The configured key, else `<dataDir>/<file>`'s, else a new key written there. Throws
 * KeyFileError when a key is malformed or its file can be read by group or others.
 */
export function loadOrCreateKey(dataDir: string, file: string, opts: KeyOptions = {}): Buffer {
  if (opts.configured) return decodeKey(opts.configured, opts.setting ?? 'the configured key');
  const full = path.join(dataDir, file);
  fs.mkdirSync(dataDir, { recursive: true, mode: 0o700 });
  const created = createKeyFile(full);
  if (created) return created;
  const mode = fs.statSync(full).mode & 0o777;
  if (mode & 0o077) throw new KeyFileError(`${full} can be read by other users (mode ${mode.toString(8)}): run chmod 600 ${full}`);
  return decodeKey(fs.readFileSync(full, 'utf8'), full);
}

/** Link errors of a file system without hard links. */
const NO_LINKS = new Set(['EPERM', 'ENOTSUP', 'EOPNOTSUPP', 'ENOSYS']);

/**
 * A new key written to `full`, or undefined when the file exists (another process may have
 * just made it). Never overwrites a key, and never shows one half written: replicas that
 * start together on one data directory each either make the key or read all of it. The key
 * is written under a name of its own first, then linked into place.
 */
function createKeyFile(full: string): Buffer | undefined {
  const key = crypto.randomBytes(KEY_BYTES);
  const text = key.toString('base64') + '\n';
  const exists = (e: unknown) => (e as NodeJS.ErrnoException).code === 'EEXIST';
  const draft = `${full}.${process.pid}.${crypto.randomBytes(6).toString('hex')}.new`;
  fs.writeFileSync(draft, text, { mode: 0o600, flag: 'wx' });
  try {
    fs.linkSync(draft, full);
    return key;
  } catch (e) {
    if (exists(e)) return undefined;
    if (!NO_LINKS.has((e as NodeJS.ErrnoException).code ?? '')) throw e;
  } finally {
    fs.rmSync(draft, { force: true });
  }
  // Without hard links, the file is made in place: a process starting at the same moment could read it unfinished.
  try {
    fs.writeFileSync(full, text, { mode: 0o600, flag: 'wx' });
    return key;
  } catch (e) {
    if (exists(e)) return undefined;
    throw e;
  }
}
