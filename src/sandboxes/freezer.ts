/**
 * Freezing a sandbox's cgroup: an idle gVisor sandbox on the systrap platform wakes every
 * 400 µs forever (23–51 ms of host CPU a second); frozen, it costs nothing, and thawing it
 * takes about a millisecond. cgroup v1 writes `freezer.state` (FROZEN, then polls until
 * the kernel says so: it passes through FREEZING); v2 writes `cgroup.freeze` and reads
 * `cgroup.events`.
 *
 * A frozen container cannot be removed (`docker rm -f` waits for the kill to be delivered,
 * which never happens on cgroup v1), nor can its runner answer: every path that stops,
 * kills or talks to a sandbox thaws it first (the driver does it for stop and attach).
 */
import fs from 'node:fs';
import path from 'node:path';
import { cgroupPaths } from './cgroup.js';

/** How long a freeze may take to settle before it is undone (the sandbox was busy in the kernel). */
const FREEZE_SETTLE_MS = 1_000;

export type FreezeState = 'frozen' | 'freezing' | 'thawed' | 'unknown';

function files(containerId: string, root?: string) {
  const p = cgroupPaths(containerId, root);
  if (!p || !p.freezer) return undefined;
  return p.version === 2
    ? { version: 2 as const, control: path.join(p.freezer, 'cgroup.freeze'), state: path.join(p.freezer, 'cgroup.events') }
    : { version: 1 as const, control: path.join(p.freezer, 'freezer.state'), state: path.join(p.freezer, 'freezer.state') };
}

/** Whether this host can freeze the container (its cgroup is visible and has a freezer). */
export function canFreeze(containerId: string, root?: string): boolean {
  return files(containerId, root) !== undefined;
}

export function freezeState(containerId: string, root?: string): FreezeState {
  const f = files(containerId, root);
  if (!f) return 'unknown';
  try {
    const text = fs.readFileSync(f.state, 'utf8');
    if (f.version === 2) return /^frozen 1$/m.test(text) ? 'frozen' : fs.readFileSync(f.control, 'utf8').trim() === '1' ? 'freezing' : 'thawed';
    const v = text.trim();
    return v === 'FROZEN' ? 'frozen' : v === 'FREEZING' ? 'freezing' : 'thawed';
  } catch {
    return 'unknown';
  }
}

/** Freezes the container; true once the kernel says it is frozen. Undone if it does not settle. */
export async function freeze(containerId: string, root?: string): Promise<boolean> {
  const f = files(containerId, root);
  if (!f) return false;
  try {
    fs.writeFileSync(f.control, f.version === 2 ? '1' : 'FROZEN');
  } catch {
    return false;
  }
  const deadline = Date.now() + FREEZE_SETTLE_MS;
  for (let wait = 1; Date.now() < deadline; wait = Math.min(wait * 2, 50)) {
    const s = freezeState(containerId, root);
    if (s === 'frozen') return true;
    if (s === 'unknown') return false;
    await new Promise((r) => setTimeout(r, wait));
  }
  thaw(containerId, root);
  return false;
}

/** Thaws the container (nothing happens to one that is not frozen, or gone). */
export function thaw(containerId: string, root?: string): boolean {
  const f = files(containerId, root);
  if (!f) return false;
  try {
    fs.writeFileSync(f.control, f.version === 2 ? '0' : 'THAWED');
    return true;
  } catch {
    return false;
  }
}
