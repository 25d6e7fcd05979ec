/**
 * What the driver and the workspace helpers do with a pod alike: wait for it to run, and
 * reach a process in it through `exec` on the API server.
 */
import { PassThrough } from 'node:stream';
import * as k8s from '@kubernetes/client-node';
import type WebSocket from 'isomorphic-ws';
import { SandboxError } from '../errors.js';
import { RUNNER_CONTAINER } from './objects.js';

/** Waits for the pod to run (watching it); its creation time. Throws saying why it will not. */
export async function waitRunning(kubeConfig: k8s.KubeConfig, namespace: string, name: string, timeoutMs: number): Promise<number> {
  const watch = new k8s.Watch(kubeConfig);
  let abort: AbortController | undefined;
  let done = false;
  let last = 'no news of it';
  try {
    return await new Promise<number>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`the pod did not run within ${Math.round(timeoutMs / 1000)} s (${last})`)), timeoutMs);
      const settle = (f: () => void) => {
        clearTimeout(timer);
        f();
      };
      const seen = (type: string, pod: k8s.V1Pod) => {
        if (type === 'DELETED') return settle(() => reject(new Error('the pod was deleted before it ran')));
        const phase = pod.status?.phase;
        const waiting = pod.status?.containerStatuses?.[0]?.state?.waiting;
        const unscheduled = pod.status?.conditions?.find((c) => c.type === 'PodScheduled' && c.status === 'False');
        last = waiting ? `${waiting.reason}: ${waiting.message ?? ''}` : unscheduled ? `not scheduled: ${unscheduled.message ?? unscheduled.reason ?? ''}` : `phase ${phase}`;
        if (phase === 'Running') return settle(() => resolve(createdOf(pod)));
        if (phase === 'Failed' || phase === 'Succeeded') return settle(() => reject(new Error(`the pod ended before it ran (${terminatedText(pod)})`)));
        if (waiting && /ErrImagePull|ImagePullBackOff|InvalidImageName|CreateContainerConfigError|CreateContainerError/.test(waiting.reason ?? '')) {
          return settle(() => reject(new SandboxError(`the sandbox's pod cannot start: ${last}`, /Image/.test(waiting.reason ?? '') ? 'image_missing' : 'start_failed')));
        }
      };
      void watch
        .watch(`/api/v1/namespaces/${namespace}/pods`, { fieldSelector: `metadata.name=${name}` }, seen, (err: unknown) => {
          if (err) settle(() => reject(new Error(`watching the pod failed: ${(err as Error).message ?? String(err)}`)));
          else settle(() => reject(new Error(`the API server ended the watch before the pod ran (${last})`)));
        })
        .then(
          (a) => {
            abort = a;
            // Settled before the watch was set up (the timer): it is stopped now, not left open.
            if (done) a.abort();
          },
          (e: Error) => settle(() => reject(new Error(`watching the pod failed: ${e.message}`))),
        );
    });
  } finally {
    done = true;
    abort?.abort();
  }
}

/**
 * The stdio of `command` exec'd in the pod's container (WebSocket channel protocol).
 * `stdout` ends when the socket closes: the command ended, the pod did, the API server
 * went, or the caller closed it.
 */
export async function execStreams(exec: k8s.Exec, namespace: string, name: string, command: string[]): Promise<{ stdin: PassThrough; stdout: PassThrough; stderr: PassThrough; ws: WebSocket }> {
  const stdin = new PassThrough();
  const stdout = new PassThrough();
  const stderr = new PassThrough();
  const ws = (await exec.exec(namespace, name, RUNNER_CONTAINER, command, stdout, stderr, stdin, false)) as WebSocket;
  const ended = () => {
    if (!stdout.writableEnded) stdout.end();
    if (!stderr.writableEnded) stderr.end();
  };
  ws.addEventListener('close', ended);
  ws.addEventListener('error', ended);
  return { stdin, stdout, stderr, ws };
}

export function createdOf(pod: k8s.V1Pod): number {
  const t = pod.metadata?.creationTimestamp;
  return t ? new Date(t).getTime() : Date.now();
}

function terminatedText(pod: k8s.V1Pod): string {
  const t = pod.status?.containerStatuses?.[0]?.state?.terminated;
  return t ? `exit code ${t.exitCode}${t.reason ? `, ${t.reason}` : ''}${t.message ? `: ${t.message}` : ''}` : (pod.status?.message ?? pod.status?.phase ?? 'unknown');
}
