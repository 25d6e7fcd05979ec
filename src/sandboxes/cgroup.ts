/**
 * A container's cgroup, read straight from /sys/fs/cgroup: CPU time, memory now and at
 * its peak, processes. A few small file reads instead of a `docker stats` round trip
 * through dockerd, so the admin page can sample every sandbox often for all its viewers,
 * and each run's CPU time can be measured. Both cgroup v1 (cpuacct and memory
 * hierarchies) and v2 (one unified directory), with Docker's cgroupfs layout
 * (`docker/<id>`) or systemd's (`system.slice/docker-<id>.scope`).
 */
import fs from 'node:fs';
import path from 'node:path';

export interface CgroupSample {
  /** CPU time used since the container started, in nanoseconds. */
  cpuNs: number;
  /** Memory in use without reclaimable page cache (as `docker stats` shows it). */
  memoryBytes: number;
  /** The most it used (v1 max_usage_in_bytes, v2 memory.peak where the kernel has it). */
  memoryPeakBytes: number | null;
  pids: number | null;
}

interface Paths {
  version: 1 | 2;
  cpu: string;
  memory: string;
  pids: string;
  /** The freezer: v1's own hierarchy, v2's unified directory. */
  freezer: string;
}

const ROOT = '/sys/fs/cgroup';
const ID = /^[0-9a-f]{64}$/;

const versions = new Map<string, 1 | 2>();
function cgroupVersion(root: string): 1 | 2 {
  let v = versions.get(root);
  if (!v) versions.set(root, (v = fs.existsSync(path.join(root, 'cgroup.controllers')) ? 2 : 1));
  return v;
}

/** Found paths, by root and container id. */
const found = new Map<string, Paths | null>();

/** Where a container's cgroup is, or null when this host does not show it (another runtime, a remote dockerd). */
export function cgroupPaths(containerId: string, root = ROOT): Paths | null {
  if (!ID.test(containerId)) return null;
  const known = found.get(`${root}\0${containerId}`);
  if (known !== undefined) return known;
  const leaf = [`docker/${containerId}`, `system.slice/docker-${containerId}.scope`];
  let paths: Paths | null = null;
  if (cgroupVersion(root) === 2) {
    const dir = leaf.map((l) => path.join(root, l)).find((d) => fs.existsSync(d));
    if (dir) paths = { version: 2, cpu: dir, memory: dir, pids: dir, freezer: dir };
  } else {
    const pick = (ctl: string) => leaf.map((l) => path.join(root, ctl, l)).find((d) => fs.existsSync(d));
    const cpu = pick('cpuacct') ?? pick('cpu,cpuacct');
    const memory = pick('memory');
    if (cpu && memory) paths = { version: 1, cpu, memory, pids: pick('pids') ?? '', freezer: pick('freezer') ?? '' };
  }
  // Only a found cgroup is remembered: one looked for before the container was made is looked for again.
  if (paths) found.set(`${root}\0${containerId}`, paths);
  return paths;
}

/** Forgets a removed container's paths. */
export function forgetCgroup(containerId: string, root = ROOT): void {
  found.delete(`${root}\0${containerId}`);
}

const num = (file: string): number | null => {
  try {
    const v = fs.readFileSync(file, 'utf8').trim();
    return v === 'max' ? null : Number(v);
  } catch {
    return null;
  }
};

const statLine = (text: string, key: string): number => {
  const at = text.startsWith(`${key} `) ? 0 : text.indexOf(`\n${key} `) + 1;
  if (at === 0 && !text.startsWith(`${key} `)) return 0;
  return Number(text.slice(at + key.length + 1, text.indexOf('\n', at) >>> 0)) || 0;
};

/**
 * One sample of the container's cgroup; undefined when it is not readable (gone, or not
 * on this host). Synchronous: five reads of small kernel files take tens of microseconds,
 * far less than as many trips through the thread pool.
 */
export function sampleCgroup(containerId: string, root = ROOT): CgroupSample | undefined {
  const p = cgroupPaths(containerId, root);
  if (!p) return undefined;
  try {
    if (p.version === 2) {
      const memStat = fs.readFileSync(path.join(p.memory, 'memory.stat'), 'utf8');
      return {
        cpuNs: statLine(fs.readFileSync(path.join(p.cpu, 'cpu.stat'), 'utf8'), 'usage_usec') * 1000,
        memoryBytes: Math.max(0, (num(path.join(p.memory, 'memory.current')) ?? 0) - statLine(memStat, 'inactive_file')),
        memoryPeakBytes: num(path.join(p.memory, 'memory.peak')),
        pids: num(path.join(p.pids, 'pids.current')),
      };
    }
    const cpu = num(path.join(p.cpu, 'cpuacct.usage'));
    if (cpu === null) return undefined;
    const memStat = fs.readFileSync(path.join(p.memory, 'memory.stat'), 'utf8');
    return {
      cpuNs: cpu,
      memoryBytes: Math.max(0, (num(path.join(p.memory, 'memory.usage_in_bytes')) ?? 0) - statLine(memStat, 'total_inactive_file')),
      memoryPeakBytes: num(path.join(p.memory, 'memory.max_usage_in_bytes')),
      pids: p.pids ? num(path.join(p.pids, 'pids.current')) : null,
    };
  } catch {
    return undefined;
  }
}

/**
 * CPU time of the container now, in ms (a run's CPU time is the difference across it).
 * Read synchronously: it is on every run's path, and a read of a cgroup file takes
 * microseconds, less than a trip through the thread pool.
 */
export function cpuMsNow(containerId: string, root = ROOT): number | undefined {
  const p = cgroupPaths(containerId, root);
  if (!p) return undefined;
  try {
    if (p.version === 2) return statLine(fs.readFileSync(path.join(p.cpu, 'cpu.stat'), 'utf8'), 'usage_usec') / 1000;
    return Number(fs.readFileSync(path.join(p.cpu, 'cpuacct.usage'), 'utf8').trim()) / 1e6;
  } catch {
    return undefined;
  }
}
