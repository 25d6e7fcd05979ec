/**
 * runsc processes that outlived their container: a `runsc-sandbox` or `runsc-gofer`
 * whose container (named in its command line, under containerd's task directory) is no
 * longer known to dockerd. A crash of dockerd or containerd can leave them; they hold
 * memory and a share of CPU for nothing. Found by reading /proc; removing them is a
 * SIGKILL after dockerd is asked again, so a container made in between is never touched.
 */
import fs from 'node:fs';

export interface RuntimeLeftover {
  pid: number;
  /** runsc-sandbox or runsc-gofer */
  role: string;
  containerId: string;
}

const CONTAINER_IN_ARGS = /\/([0-9a-f]{64})\/log\.json/;

/** Every runsc process on the host with the container it serves. */
export function runscProcesses(proc = '/proc'): RuntimeLeftover[] {
  const out: RuntimeLeftover[] = [];
  for (const name of fs.readdirSync(proc)) {
    if (!/^\d+$/.test(name)) continue;
    let args: string[];
    try {
      args = fs.readFileSync(`${proc}/${name}/cmdline`, 'utf8').split('\0');
    } catch {
      continue;
    }
    const role = args[0] ?? '';
    if (role !== 'runsc-sandbox' && role !== 'runsc-gofer') continue;
    // runsc runs as root: a process of another user naming itself so is not one.
    try {
      if (fs.statSync(`${proc}/${name}`).uid !== 0) continue;
    } catch {
      continue;
    }
    const id = args.map((a) => CONTAINER_IN_ARGS.exec(a)?.[1]).find(Boolean);
    if (id) out.push({ pid: Number(name), role, containerId: id });
  }
  return out;
}

/** The runsc processes whose container dockerd does not know. */
export async function runtimeLeftovers(knownContainers: () => Promise<Set<string>>): Promise<RuntimeLeftover[]> {
  const procs = runscProcesses();
  if (!procs.length) return [];
  const known = await knownContainers();
  return procs.filter((p) => !known.has(p.containerId));
}

/** Kills the leftovers found now (asked again, just before); how many. */
export async function removeRuntimeLeftovers(knownContainers: () => Promise<Set<string>>): Promise<number> {
  let n = 0;
  for (const p of await runtimeLeftovers(knownContainers)) {
    // The pid still names the same process (not one that took a freed pid since).
    let args: string[];
    try {
      args = fs.readFileSync(`/proc/${p.pid}/cmdline`, 'utf8').split('\0');
    } catch {
      continue;
    }
    if (args[0] !== p.role || !args.some((a) => CONTAINER_IN_ARGS.exec(a)?.[1] === p.containerId)) continue;
    try {
      process.kill(p.pid, 'SIGKILL');
      n++;
    } catch {
      /* gone already */
    }
  }
  return n;
}
