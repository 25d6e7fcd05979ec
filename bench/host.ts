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
