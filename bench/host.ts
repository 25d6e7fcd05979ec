/** Readings of the whole host that the benches share. */
import fs from 'node:fs';

/**
 * CPU time the whole host has spent working since boot, all cores together, in ms (from
 * /proc/stat: user, nice, system, irq and softirq; not idle or iowait, not steal, which
 * is the hypervisor's, and not guest, which user already counts). USER_HZ is 100, so the
 * resolution is 10 ms.
 */
export function hostBusyMs(): number {
  const [user, nice, system, , , irq, softirq] = fs.readFileSync('/proc/stat', 'utf8').split('\n')[0]!.trim().split(/\s+/).slice(1).map(Number);
  return (user! + nice! + system! + irq! + softirq!) * 10;
}

/** Where a process's CPU is counted in `cpuByGroup`. */
export type CpuGroup = 'sandboxes' | 'docker' | 'gateway' | 'init' | 'kernel' | 'other';

/**
 * CPU time, in ms, that each group of the host's processes has used so far:
 * - sandboxes: the processes that exist for the given containers, those in their cgroups
 *   (gVisor's sentry, gofer and stubs, or a runc container's processes) and their
 *   containerd shims, which is what a sandbox costs the host;
 * - docker: dockerd and containerd; gateway: this process; init: pid 1 (on these VMs an
 *   agent whose own CPU grows with the number of processes); kernel: kernel threads.
 * Take two readings and subtract. Processes that end in between are missed, and time the
 * kernel spends on no process's behalf (interrupts) is in `hostBusyMs` only.
 */
export function cpuByGroup(containerIds: readonly string[]): Record<CpuGroup, number> {
  const ids = new Set(containerIds);
  const out: Record<CpuGroup, number> = { sandboxes: 0, docker: 0, gateway: 0, init: 0, kernel: 0, other: 0 };
  for (const pid of fs.readdirSync('/proc')) {
    if (!/^\d+$/.test(pid)) continue;
    try {
      const stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
      const comm = stat.slice(stat.indexOf('(') + 1, stat.lastIndexOf(')'));
      const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      const ms = (Number(fields[11]) + Number(fields[12])) * 10;
      out[groupOf(Number(pid), Number(fields[1]), comm, ids)] += ms;
    } catch {
      /* ended meanwhile */
    }
  }
  return out;
}

/**
 * What the given containers show anything that walks the host's /proc: their host
 * processes (each thread group once; under gVisor's systrap every stub thread is one) and
 * the entries of /proc/<pid>/fd over all of them (stubs share the sentry's table, and each
 * lists it whole). Per container, p50.
 */
export function procFootprint(containerIds: readonly string[]): { processes: number; fdEntries: number } {
  const ids = new Set(containerIds);
  const per = new Map<string, { processes: number; fdEntries: number }>();
  for (const pid of fs.readdirSync('/proc')) {
    if (!/^\d+$/.test(pid)) continue;
    try {
      const id = containerOf(Number(pid));
      if (id === undefined || !ids.has(id)) continue;
      const fds = fs.readdirSync(`/proc/${pid}/fd`).length;
      const c = per.get(id) ?? { processes: 0, fdEntries: 0 };
      c.processes++;
      c.fdEntries += fds;
      per.set(id, c);
    } catch {
      /* ended meanwhile */
    }
  }
  const mid = <T>(xs: T[], key: (x: T) => number) => xs.map(key).sort((a, b) => a - b)[Math.floor(xs.length / 2)] ?? NaN;
  const all = [...per.values()];
  return { processes: mid(all, (c) => c.processes), fdEntries: mid(all, (c) => c.fdEntries) };
}

/** The Docker container whose cgroup a host process is in, if any. */
function containerOf(pid: number): string | undefined {
  return /\/docker[/-]([0-9a-f]{64})/.exec(fs.readFileSync(`/proc/${pid}/cgroup`, 'utf8'))?.[1];
}

function groupOf(pid: number, ppid: number, comm: string, ids: Set<string>): CpuGroup {
  if (pid === process.pid) return 'gateway';
  if (pid === 1) return 'init';
  if (pid === 2 || ppid === 2) return 'kernel';
  const inContainer = containerOf(pid);
  if (inContainer !== undefined && ids.has(inContainer)) return 'sandboxes';
  if (comm.startsWith('containerd-shim')) {
    const args = fs.readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0');
    if (ids.has(args[args.indexOf('-id') + 1] ?? '')) return 'sandboxes';
  }
  if (comm === 'dockerd' || comm === 'containerd') return 'docker';
  return 'other';
}

/** The host's stall totals so far, in ms (pressure stall information: time some task waited for CPU, memory or I/O), and its major page faults. */
export interface Stalls {
  cpu: number;
  memory: number;
  io: number;
  majorFaults: number;
  /** Time the hypervisor ran something else while this VM wanted to run (steal), ms. */
  steal: number;
  /** CPU time pid 1 (on these VMs, an agent that reads every process's open files) has used, ms. */
  init: number;
}

/** CPU time of all of a process's threads, ms, from their schedstat (nanoseconds). */
export function processCpuMs(pid: number): number {
  let ns = 0;
  try {
    for (const t of fs.readdirSync(`/proc/${pid}/task`)) {
      try {
        ns += Number(fs.readFileSync(`/proc/${pid}/task/${t}/schedstat`, 'utf8').split(' ')[0]);
      } catch {
        // thread gone
      }
    }
  } catch {
    return NaN;
  }
  return ns / 1e6;
}

export function stalls(): Stalls {
  const some = (what: string) => {
    try {
      return Number(/^some .*total=(\d+)/m.exec(fs.readFileSync(`/proc/pressure/${what}`, 'utf8'))?.[1] ?? NaN) / 1000;
    } catch {
      return NaN;
    }
  };
  const majorFaults = Number(/^pgmajfault (\d+)/m.exec(fs.readFileSync('/proc/vmstat', 'utf8'))?.[1] ?? NaN);
  const steal = Number(fs.readFileSync('/proc/stat', 'utf8').split('\n')[0]!.trim().split(/\s+/)[8]) * 10;
  return { cpu: some('cpu'), memory: some('memory'), io: some('io'), majorFaults, steal, init: processCpuMs(1) };
}

/** `b` less `a`, field by field. */
export function stallsBetween(a: Stalls, b: Stalls): Stalls {
  return { cpu: b.cpu - a.cpu, memory: b.memory - a.memory, io: b.io - a.io, majorFaults: b.majorFaults - a.majorFaults, steal: b.steal - a.steal, init: b.init - a.init };
}
