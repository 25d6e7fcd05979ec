/**
 * The Kubernetes driver against the Docker driver on this host: the same sandbox image
 * under runsc, one user each, in one process.
 *
 * - Warm `execute_code` (python `1+1` on the sandbox manager, the path every door takes):
 *   Docker's attached stdio against the pod's channel: `exec` through the API server (here
 *   the stand-in of test/support/kube-standin.ts in a process of its own: HTTPS and the
 *   WebSocket channel protocol in front of a Docker exec, as a real API server proxies the
 *   kubelet's) of the relay in the pod, to the runner's socket.
 *   Calls alternate in blocks of 20 so that host noise falls on both alike.
 * - Cold start to the first answer: no sandbox, then a run; the sandbox stopped after.
 *   For a pod that is the claim, the ConfigMaps of /skills and /tools, the pod, its
 *   watch to Running, the attach and the runner's first answer.
 *
 *   node --import tsx bench/kubernetes.ts      (BENCH_CALLS per side, default 2000; BENCH_COLD, default 8)
 *
 * Prints p50, p95 and mean of each, and their differences. On a real cluster the API
 * server and kubelet are other machines: add their network round trip to the warm figure,
 * and image pull and scheduling to the cold one.
 */
import { createHarness, type Harness } from '../test/support/harness.js';
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { REPO_ROOT } from '../src/paths.js';
import type { SandboxOwner } from '../src/sandboxes/types.js';

const CALLS = Number(process.env.BENCH_CALLS ?? 2000);
const COLD = Number(process.env.BENCH_COLD ?? 8);
const BLOCK = 20;

const pct = (xs: number[], p: number) => [...xs].sort((a, b) => a - b)[Math.min(xs.length - 1, Math.floor((p / 100) * xs.length))]!;
const mean = (xs: number[]) => xs.reduce((a, b) => a + b, 0) / xs.length;
const f = (ms: number) => `${ms.toFixed(2)} ms`;
const line = (name: string, xs: number[]) => console.log(`${name.padEnd(28)} p50 ${f(pct(xs, 50))}  p95 ${f(pct(xs, 95))}  mean ${f(mean(xs))}`);

async function main(): Promise<void> {
  // The API server in a process of its own, as on a cluster.
  const standin = spawn(process.execPath, ['--import', 'tsx', 'test/support/kube-standin-main.ts', 'sandgate'], { cwd: REPO_ROOT, stdio: ['ignore', 'pipe', 'inherit'] });
  const [first] = (await once(standin.stdout, 'data')) as [Buffer];
  const kubeconfigPath = first.toString().trim();
  const harnesses: Harness[] = [];
  try {
    const env = { SANDGATE_PII_TOKENIZE: 'false', SANDGATE_FREEZE_AFTER_MS: '0', SANDGATE_LOG_LEVEL: 'warn' };
    const docker = await createHarness({ env });
    harnesses.push(docker);
    const kube = await createHarness({
      env: { ...env, SANDGATE_SANDBOX_DRIVER: 'kubernetes', SANDGATE_K8S_KUBECONFIG: kubeconfigPath, SANDGATE_K8S_NAMESPACE: 'sandgate', SANDGATE_K8S_IMAGE_PULL_POLICY: 'Never' },
    });
    harnesses.push(kube);
    const sides = [
      { name: 'docker', h: docker, owner: await docker.user('bench') },
      { name: 'kubernetes (exec channel)', h: kube, owner: await kube.user('bench') },
    ];
    const run = async (h: Harness, owner: SandboxOwner) => {
      const t = performance.now();
      const r = await h.manager.execute(owner, { language: 'python', code: '1+1' });
      if (r.exitCode !== 0) throw new Error(`a run failed: ${r.stderr}`);
      return performance.now() - t;
    };

    // Cold: no sandbox, then a run, alternating drivers.
    const cold: Record<string, number[]> = { docker: [], 'kubernetes (exec channel)': [] };
    for (let i = 0; i < COLD; i++) {
      for (const s of i % 2 ? [...sides].reverse() : sides) {
        await s.h.manager.stopUser(s.owner.userId);
        cold[s.name]!.push(await run(s.h, s.owner));
      }
    }

    // Warm.
    for (const s of sides) for (let i = 0; i < 300; i++) await run(s.h, s.owner);
    const warm: Record<string, number[]> = { docker: [], 'kubernetes (exec channel)': [] };
    while (warm.docker!.length < CALLS) {
      for (const s of warm.docker!.length % (2 * BLOCK) ? [...sides].reverse() : sides) for (let i = 0; i < BLOCK; i++) warm[s.name]!.push(await run(s.h, s.owner));
    }

    console.log(`\nwarm execute_code (python 1+1) on the sandbox manager, ${CALLS} calls a side`);
    for (const s of sides) line(s.name, warm[s.name]!);
    console.log(`the pod's channel adds:       p50 ${f(pct(warm['kubernetes (exec channel)']!, 50) - pct(warm.docker!, 50))}  p95 ${f(pct(warm['kubernetes (exec channel)']!, 95) - pct(warm.docker!, 95))}`);
    console.log(`\ncold start to the first answer, ${COLD} a side`);
    for (const s of sides) line(s.name, cold[s.name]!);
  } finally {
    for (const h of harnesses) await h.close();
    standin.kill('SIGTERM');
    await once(standin, 'exit');
  }
}

await main();
