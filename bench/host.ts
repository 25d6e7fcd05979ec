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

/**
 * CPU time, in ms, of the processes that exist for the given containers: those in their
 * cgroups (gVisor's sentry, gofer and stubs, or a runc container's processes) and their
 * containerd shims. What a sandbox costs the host, without the rest of the machine (on
 * these VMs the init agent's own CPU grows with the number of processes, and would
 * otherwise be counted against every sandbox). Processes that end in between are missed.
 */
export function containersCpuMs(containerIds: readonly string[]): number {
  const ids = new Set(containerIds);
  let ticks = 0;
  for (const pid of fs.readdirSync('/proc')) {
    if (!/^\d+$/.test(pid)) continue;
    try {
      const cgroup = fs.readFileSync(`/proc/${pid}/cgroup`, 'utf8');
      const inContainer = /\/docker[/-]([0-9a-f]{64})/.exec(cgroup)?.[1];
      let mine = inContainer !== undefined && ids.has(inContainer);
      if (!mine) {
        const args = fs.readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0');
        if (args[0]?.includes('containerd-shim')) mine = ids.has(args[args.indexOf('-id') + 1] ?? '');
      }
      if (!mine) continue;
      const stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
      const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      ticks += Number(fields[11]) + Number(fields[12]);
    } catch {
      /* ended meanwhile */
    }
  }
  return ticks * 10;
}
