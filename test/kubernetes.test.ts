/**
 * The gateway with its sandboxes on a cluster (the `kubernetes` test project): the
 * Kubernetes driver through the stand-in API server (test/support/kube-standin.ts), each
 * pod a runsc container on the local Docker. What only a whole gateway shows: a pod
 * adopted after a restart, a pod that dies mid-run, files through the helper pod, and
 * /readyz and the admin view naming what a cluster does not give.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import type { CallToolResult } from '@modelcontextprotocol/sdk/types.js';
import Docker from 'dockerode';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { kubernetesWanted, testStandin, TEST_NAMESPACE } from './support/kube.js';
import { callTool, startGateway, toolText, type Gateway } from './support/mcp.js';
import { eventually } from './support/until.js';
import { webSession } from './support/web-session.js';
import { ensureUser } from '../src/accounts/accounts.js';

const call = callTool<CallToolResult>;
const sandboxPods = async () => (await testStandin()).objects('pods', TEST_NAMESPACE).filter((p) => ['user', 'pool'].includes(p.metadata.labels?.['app.kubernetes.io/component']));

async function connect(gw: Gateway, token: string): Promise<Client> {
  const client = new Client({ name: 'sandgate-test', version: '1.0.0' });
  await client.connect(new StreamableHTTPClientTransport(new URL(gw.mcpUrl), { requestInit: { headers: { Authorization: `Bearer ${token}` } } }));
  return client;
}

describe.runIf(kubernetesWanted())('a gateway whose sandboxes are pods', () => {
  const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'sandgate-k8s-gw-'));
  let gw: Gateway;
  let token: string;
  let client: Client;

  beforeAll(async () => {
    gw = await startGateway({ dataDir });
    token = await gw.tokenFor('kate', 'laptop');
    client = await connect(gw, token);
  });
  afterAll(async () => {
    await client?.close();
    await gw?.close();
  });

  it('passes the cluster preflight, and /readyz names the cluster’s checks', async () => {
    expect(gw.preflight?.ok).toBe(true);
    const r = await fetch(`${gw.url}/readyz`);
    expect(r.status).toBe(200);
    const body = (await r.json()) as { checks: Record<string, { ok: boolean }> };
    expect(Object.keys(body.checks)).toEqual(expect.arrayContaining(['api', 'namespace', 'runtimeClass', 'permissions', 'runtime']));
    expect(body.checks).not.toHaveProperty('docker');
  });

  it('runs code in the user’s pod, and the file tools reach its workspace claim without a host path', async () => {
    const r = await call(client, 'execute_code', { language: 'python', code: "open('/workspace/table.csv', 'w').write('name,n\\nada,1\\n'); x = 41; print('ok')" });
    expect(toolText(r)).toMatch(/ok/);
    const pods = await sandboxPods();
    expect(pods).toHaveLength(1);
    expect(pods[0]!.spec.runtimeClassName).toBe('gvisor');
    expect(toolText(await call(client, 'read_file', { path: 'table.csv' }))).toContain('ada,1');
    await call(client, 'write_file', { path: 'from-tools.txt', content: 'written by the file tool' });
    expect(toolText(await call(client, 'execute_code', { language: 'bash', code: 'cat /workspace/from-tools.txt; ls /workspace' }))).toMatch(/written by the file tool[\s\S]*table\.csv/);
    // Nothing of the workspace is on the gateway's host.
    expect(fs.existsSync(path.join(dataDir, 'workspaces'))).toBe(false);
  });

  it('the files page uploads, previews and serves files of the claim, through the helper pod', async () => {
    const kate = (await ensureUser(gw.harness.store.db, 'kate'))!;
    const web = await webSession(gw, kate);
    const boundary = 'sandgateboundary';
    const body = Buffer.from(`--${boundary}\r\nContent-Disposition: form-data; name="file"; filename="uploaded.csv"\r\nContent-Type: text/csv\r\n\r\ncity,n\nLisbon,3\r\n--${boundary}--\r\n`);
    const up = await fetch(`${gw.url}/files/upload?dir=`, { method: 'POST', headers: { cookie: web.cookie(), 'x-csrf-token': web.csrf, 'hx-request': 'true', 'content-type': `multipart/form-data; boundary=${boundary}` }, body: new Uint8Array(body) });
    expect(up.status).toBe(200);
    expect(toolText(await call(client, 'execute_code', { language: 'bash', code: 'cat /workspace/uploaded.csv' }))).toContain('Lisbon,3');
    expect(await (await web.get('/files/table?path=uploaded.csv', { htmx: false })).text()).toContain('Lisbon');
    expect(await (await web.get('/files/raw?path=uploaded.csv', { htmx: false })).text()).toBe('city,n\nLisbon,3');
  });

  it('a restarted gateway adopts the running pod: same pod, Python state and files kept', async () => {
    const before = (await sandboxPods()).map((p) => p.metadata.name);
    await client.close();
    await gw.close({ keepData: true });
    gw = await startGateway({ dataDir });
    client = await connect(gw, token);
    const r = await call(client, 'execute_code', { language: 'python', code: 'print(x + 1)' });
    expect(toolText(r)).toMatch(/42/);
    expect((await sandboxPods()).map((p) => p.metadata.name)).toEqual(before);
  });

  it('a pod that dies mid-run ends that call with a clear error; the next run gets a new pod with the files intact', async () => {
    const standin = await testStandin();
    const [pod] = await sandboxPods();
    const running = call(client, 'execute_code', { language: 'python', code: 'import time; print("started", flush=True); time.sleep(60)' });
    await new Promise((r) => setTimeout(r, 1500));
    // The node loses the container (an eviction, an OOM kill, a node failure).
    await new Docker().getContainer(standin.containerOf(TEST_NAMESPACE, pod!.metadata.name)!).kill();
    const r = await running;
    expect(r.isError).toBe(true);
    // What ran came back, and why it stopped.
    expect(toolText(r)).toMatch(/^started/);
    expect(toolText(r)).toMatch(/The sandbox stopped during this execution[\s\S]*files in \/workspace are kept/);
    const next = await call(client, 'execute_code', { language: 'bash', code: 'cat /workspace/table.csv' });
    expect(toolText(next)).toContain('ada,1');
    await eventually(async () => {
      const pods = await sandboxPods();
      return pods.length === 1 && pods[0]!.metadata.name !== pod!.metadata.name;
    }, 15_000);
  });

  it('the admin page lists the pod, names what a cluster does not give as not available, and stopping it deletes the pod', async () => {
    const admin = await ensureUser(gw.harness.store.db, 'root-admin', { isAdmin: true });
    const page = await (await (await webSession(gw, admin)).get('/admin', { htmx: false })).text();
    expect(page).toMatch(/<strong>freezing<\/strong>: not available/);
    expect(page).toMatch(/<strong>runtimeProcesses<\/strong>: not available/);
    expect(page).toMatch(/<strong>runtime<\/strong>: ok — a test pod under RuntimeClass gvisor runs on gVisor/);
    expect(page).toContain('kate');
    const list = await gw.harness.manager.list();
    expect(list).toHaveLength(1);
    const owner = list[0]!;
    await gw.harness.manager.stopUser(owner.userId);
    await eventually(async () => (await sandboxPods()).length === 0, 15_000);
  });
});
