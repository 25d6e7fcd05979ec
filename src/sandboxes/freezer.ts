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
 * Nor can dockerd stop one (its shutdown waits 15 s, then leaves it) or start while one
 * exists (it waits forever for the container's state). So every freeze is written down
 * first, one file per container in FROZEN_RECORDS naming the gateway that froze it, and
 * removed by the thaw: what a killed gateway left frozen is thawed by the next start,
 * before dockerd is asked anything (`thawLeftFrozen`, and scripts/setup-runtime.sh).
 */
import fs from 'node:fs';
import path from 'node:path';
import { cgroupPaths } from './cgroup.js';

/** How long a freeze may take to settle before it is undone (the sandbox was busy in the kernel). */
const FREEZE_SETTLE_MS = 1_000;

/**
 * One file per frozen container (its id): "<gateway id> <pid> <start time>" of the gateway
 * process that froze it (scripts/thaw-frozen.sh leaves the records of one still running).
 */
export const FROZEN_RECORDS = '/run/sandgate/frozen';

const ID = /^[0-9a-f]{64}$/;

export interface FreezerOptions {
  /** The cgroup root (tests); /sys/fs/cgroup by default. */
  root?: string;
  /** The gateway freezing it (written in its record with this process's pid, for `thawLeftFrozen`). */
  owner?: string;
  /** Where the records go; FROZEN_RECORDS by default. */
  records?: string;
}

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
export async function freeze(containerId: string, opts: FreezerOptions = {}): Promise<boolean> {
  const { root } = opts;
  const f = files(containerId, root);
  if (!f) return false;
  const records = opts.records ?? FROZEN_RECORDS;
  try {
    // Written down first: a sandbox nobody could find again to thaw is never frozen.
    ownRecordsDir(records);
    fs.writeFileSync(path.join(records, containerId), `${opts.owner ?? ''} ${process.pid} ${startTime()}\n`, { flag: 'w', mode: 0o600 });
    fs.writeFileSync(f.control, f.version === 2 ? '1' : 'FROZEN');
  } catch {
    thaw(containerId, opts);
    return false;
  }
  const deadline = Date.now() + FREEZE_SETTLE_MS;
  for (let wait = 1; Date.now() < deadline; wait = Math.min(wait * 2, 50)) {
    const s = freezeState(containerId, root);
    if (s === 'frozen') return true;
    if (s === 'unknown') break;
    await new Promise((r) => setTimeout(r, wait));
  }
  thaw(containerId, opts);
  return false;
}

let started: string | undefined;
/** When this process started (field 22 of /proc/self/stat): with the pid, it names this process and no later one. */
function startTime(): string {
  if (started === undefined) {
    const stat = fs.readFileSync('/proc/self/stat', 'utf8');
    started = stat.slice(stat.lastIndexOf(')') + 2).split(' ')[19] ?? '';
  }
  return started;
}

/**
 * The records' directory, made if missing; refused (thrown) unless it is a real
 * directory of this process's user that no one else may write to: a record planted
 * there would have a gateway thaw a container that is not its own.
 */
function ownRecordsDir(dir: string): void {
  fs.mkdirSync(dir, { recursive: true, mode: 0o700 });
  const st = fs.lstatSync(dir);
  if (!st.isDirectory() || st.uid !== process.getuid?.() || (st.mode & 0o022) !== 0) {
    throw new Error(`${dir} is not a directory only this user can write to`);
  }
}

/**
 * Thaws the container (nothing happens to one that is not frozen) and drops its record,
 * unless the thaw failed while the cgroup is still there: the record stays for the next
 * start to try again.
 */
export function thaw(containerId: string, opts: FreezerOptions = {}): boolean {
  const f = files(containerId, opts.root);
  let ok = false;
  let gone = !f;
  if (f) {
    try {
      fs.writeFileSync(f.control, f.version === 2 ? '0' : 'THAWED');
      ok = true;
    } catch (e) {
      gone = (e as NodeJS.ErrnoException).code === 'ENOENT';
    }
  }
  if ((ok || gone) && ID.test(containerId)) fs.rmSync(path.join(opts.records ?? FROZEN_RECORDS, containerId), { force: true });
  return ok;
}

/**
 * Thaws every container the records say `owner` (a gateway id) froze, or every one
 * recorded when `owner` is undefined, and drops their records; returns how many were
 * frozen. A gateway killed while sandboxes were frozen leaves them so, and dockerd can
 * neither stop them nor start while they exist.
 */
export function thawLeftFrozen(owner?: string, opts: Omit<FreezerOptions, 'owner'> = {}): number {
  const records = opts.records ?? FROZEN_RECORDS;
  let names: string[];
  try {
    names = fs.readdirSync(records);
  } catch {
    return 0;
  }
  let n = 0;
  for (const id of names) {
    if (!ID.test(id)) continue;
    let who: string;
    try {
      who = fs.readFileSync(path.join(records, id), 'utf8').split(' ')[0]!;
    } catch {
      continue;
    }
    if (owner !== undefined && who !== owner) continue;
    const state = freezeState(id, opts.root);
    if (state === 'frozen' || state === 'freezing') n++;
    thaw(id, opts);
  }
  return n;
}
