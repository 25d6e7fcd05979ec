/**
 * Hostile uploads against the real gateway (real sandboxes, real loop-mounted workspaces
 * with a small size limit, a stand-in OpenAI model): while one member's chat turn streams
 * over the live channel, another member sends every kind of upload the workspace cannot
 * take. Each gets a clear 4xx, nothing half-written stays behind, the gateway keeps
 * serving and the first member's turn finishes.
 */
import http from 'node:http';
import { io as ioClient, type Socket } from 'socket.io-client';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ensureUser, type User } from '../../accounts/accounts.js';
import { createLoginLink } from '../../auth/login-links.js';
import { startGateway, type Gateway } from '../../../test/support/mcp.js';
import { startStandin, type Standin } from '../../../test/support/model-standins.js';
import { until } from '../../../test/support/until.js';

const WORKSPACE_MB = 16;

let model: Standin;
let gw: Gateway;
/** Promise rejections nobody handled while the gateway ran in this process (Node would end a real gateway on the first). */
const stray: unknown[] = [];
const onStray = (reason: unknown) => stray.push(reason);

beforeAll(async () => {
  process.on('unhandledRejection', onStray);
  model = await startStandin('openai', (req) => {
    if (req.lastToolResult === undefined) return { toolCalls: [{ name: 'execute_code', args: { language: 'bash', code: 'echo started; sleep 12; echo slow-done' } }] };
    return { text: ['The run said: ', req.lastToolResult.slice(0, 200)] };
  });
  gw = await startGateway({
    env: { SANDGATE_WORKSPACE_MB: String(WORKSPACE_MB), SANDGATE_OPENAI_API_KEY: 'sk-team', SANDGATE_OPENAI_BASE_URL: model.baseURL, SANDGATE_MODELS: 'openai:gpt-test' },
  });
});

afterAll(async () => {
  await gw?.close();
  await model?.close();
  process.off('unhandledRejection', onStray);
});

interface Session {
  cookie: string;
  csrf: string;
}

const setCookie = (res: Response) =>
  res.headers
    .getSetCookie()
    .map((c) => c.split(';')[0]!)
    .find((c) => c.startsWith('sandgate.sid='));

/** Signs a user in with a one-time link, as a browser does: the link's form, then its post. */
async function signIn(user: User): Promise<Session> {
  const secret = (await createLoginLink(gw.gateway.store.db, user.id)).secret;
  const form = await fetch(`${gw.url}/login/link/${secret}`);
  const first = setCookie(form)!;
  const formCsrf = /name="_csrf" value="([^"]+)"/.exec(await form.text())![1]!;
  const posted = await fetch(`${gw.url}/login/link`, {
    method: 'POST',
    redirect: 'manual',
    headers: { cookie: first, 'content-type': 'application/x-www-form-urlencoded' },
    body: new URLSearchParams({ _csrf: formCsrf, secret }),
  });
  expect(posted.status).toBe(303);
  const cookie = setCookie(posted) ?? first;
  const chat = await fetch(`${gw.url}/chat`, { headers: { cookie } });
  expect(chat.status).toBe(200);
  return { cookie, csrf: /data-csrf="([^"]+)"/.exec(await chat.text())![1]! };
}

/**
 * A multipart body as any client may write it: the `dir` field, then one file whose name
 * goes into the header as raw bytes (or, with `star`, as an RFC 5987 `filename*`).
 */
function multipart(opts: { dir?: string; name: Buffer | string; star?: string; data: Buffer }): { body: Buffer; type: string } {
  const boundary = 'sandgate-upload-boundary';
  const parts: Buffer[] = [];
  if (opts.dir !== undefined) parts.push(Buffer.from(`--${boundary}\r\nContent-Disposition: form-data; name="dir"\r\n\r\n${opts.dir}\r\n`));
  const filename = opts.star !== undefined ? Buffer.from(`filename*=UTF-8''${opts.star}`) : Buffer.concat([Buffer.from('filename="'), Buffer.from(opts.name), Buffer.from('"')]);
  parts.push(Buffer.concat([Buffer.from(`--${boundary}\r\nContent-Disposition: form-data; name="file"; `), filename, Buffer.from('\r\nContent-Type: application/octet-stream\r\n\r\n')]));
  parts.push(opts.data, Buffer.from(`\r\n--${boundary}--\r\n`));
  return { body: Buffer.concat(parts), type: `multipart/form-data; boundary=${boundary}` };
}

/** One upload as the files page sends it (htmx: the answer is a notice to swap in). */
async function upload(s: Session, opts: Parameters<typeof multipart>[0]): Promise<{ status: number; text: string }> {
  const { body, type } = multipart(opts);
  const res = await fetch(`${gw.url}/files/upload`, {
    method: 'POST',
    headers: { cookie: s.cookie, 'x-csrf-token': s.csrf, 'hx-request': 'true', 'content-type': type },
    body: new Uint8Array(body),
    signal: AbortSignal.timeout(15_000),
  });
  return { status: res.status, text: await res.text() };
}

/** Every file in a user's workspace, recursively (symbolic links are never listed). */
async function filesOf(user: User): Promise<string[]> {
  const w = await gw.gateway.manager.openWorkspace({ userId: user.id, name: user.name });
  return (await w.list('', { recursive: true, limit: 1000 })).filter((e) => e.type === 'file').map((e) => e.path).sort();
}

/** A conversation of `s` and its live channel: the swaps it received. */
async function watchedConversation(s: Session): Promise<{ id: string; socket: Socket; swaps: { target: string; swap: string; html: string }[] }> {
  const created = await fetch(`${gw.url}/chat/new`, {
    method: 'POST',
    redirect: 'manual',
    headers: { cookie: s.cookie, 'content-type': 'application/x-www-form-urlencoded', 'x-csrf-token': s.csrf },
    body: new URLSearchParams({}),
  });
  expect(created.status).toBe(303);
  const id = created.headers.get('location')!.split('/').pop()!;
  const swaps: { target: string; swap: string; html: string }[] = [];
  const socket = ioClient(gw.url, { transports: ['websocket'], reconnection: false, auth: { csrf: s.csrf }, extraHeaders: { origin: gw.url, cookie: s.cookie } });
  socket.on('swap', (swap: { target: string; swap: string; html: string }) => swaps.push(swap));
  await new Promise<void>((resolve, reject) => {
    socket.on('connect', () => socket.emit('watch', id, (r: { ok: boolean }) => (r.ok ? resolve() : reject(new Error('watch refused')))));
    socket.on('connect_error', reject);
  });
  return { id, socket, swaps };
}

describe('uploads the workspace cannot take', () => {
  it('each answer a clear 4xx and leave nothing behind, while another member’s turn streams on to its end', async () => {
    const db = gw.gateway.store.db;
    const ann = await ensureUser(db, 'ann');
    const bob = await ensureUser(db, 'bob');
    const annSession = await signIn(ann);
    const bobSession = await signIn(bob);
    // Bob's own code makes a link out of his workspace, and a folder to upload into.
    const made = await gw.gateway.manager.execute({ userId: bob.id, name: bob.name }, { language: 'bash', code: 'ln -s / /workspace/link && mkdir -p /workspace/inbox && echo made' });
    expect(made.stdout.trim()).toBe('made');

    // Ann's turn starts: the model runs code that prints, then takes a while.
    const conversation = await watchedConversation(annSession);
    const sent = await fetch(`${gw.url}/c/${conversation.id}/send`, {
      method: 'POST',
      headers: { cookie: annSession.cookie, 'x-csrf-token': annSession.csrf, 'content-type': 'application/x-www-form-urlencoded' },
      body: new URLSearchParams({ text: 'run the slow job' }),
    });
    expect(sent.status).toBe(204);
    const finished = () => conversation.swaps.some((s) => /^#turn-\d+$/.test(s.target) && s.swap === 'outerHTML');
    await until(() => conversation.swaps.some((s) => s.target.startsWith('#out-') && s.html.includes('started')), 60_000);

    const small = Buffer.from('hello\n');
    const triggers: [string, Parameters<typeof upload>[1], number, RegExp][] = [
      ['a name over 255 bytes', { name: `${'a'.repeat(300)}.txt`, data: small }, 400, /at most 255 bytes/],
      ['a name over 255 bytes in fewer characters', { name: `${'é'.repeat(130)}.txt`, data: small }, 400, /at most 255 bytes/],
      ['the folder ../..', { dir: '../..', name: 'escape.txt', data: small }, 403, /climbs out of the workspace/],
      ['an absolute folder', { dir: '/etc', name: 'escape.txt', data: small }, 403, /outside the workspace/],
      ['the name .', { name: '.', data: small }, 400, /no usable name/],
      ['the name ..', { name: '..', data: small }, 400, /no usable name/],
      ['the name .. as a filename* parameter', { name: '', star: '..', data: small }, 400, /no usable name/],
      ['a folder through a symbolic link', { dir: 'link', name: 'passwd', data: small }, 403, /symbolic link/],
      ['a folder below a symbolic link', { dir: 'link/tmp', name: 'x.txt', data: small }, 403, /symbolic link/],
      ['a NUL in the name', { name: Buffer.from('bad\0name.txt', 'latin1'), data: small }, 400, /could not be read/],
      ['a NUL in an encoded name', { name: '', star: 'bad%00name.txt', data: small }, 400, /NUL/],
      ['a NUL in the folder', { dir: 'in\0box', name: 'x.txt', data: small }, 400, /invalid path/],
      ['a file larger than the space left', { dir: 'inbox', name: 'big.bin', data: Buffer.alloc((WORKSPACE_MB + 8) * 1024 * 1024, 7) }, 507, /workspace is full/],
    ];
    const answers: { what: string; status: number; clear: boolean }[] = [];
    for (const [what, opts, , message] of triggers) {
      // An upload that never gets an answer is one of the failures looked for.
      const r = await upload(bobSession, opts).catch((e: unknown) => ({ status: 0, text: String(e) }));
      answers.push({ what, status: r.status, clear: /^<div class="notice error" role="alert">/.test(r.text) && message.test(r.text) });
      expect((await fetch(`${gw.url}/healthz`)).status, what).toBe(200);
    }
    expect(answers).toEqual(triggers.map(([what, , status]) => ({ what, status, clear: true })));
    // All of it happened while Ann's turn was still running.
    expect(finished()).toBe(false);
    expect(stray).toEqual([]);

    // Nothing of any refused upload is in Bob's workspace, and its space is free again.
    expect(await filesOf(bob)).toEqual([]);
    const fits = await upload(bobSession, { dir: 'inbox', name: 'café ☕.txt', data: Buffer.alloc((WORKSPACE_MB / 2) * 1024 * 1024, 1) });
    expect(fits.status, fits.text).toBe(200);
    expect(fits.text).toContain('Uploaded café ☕.txt.');
    expect(await filesOf(bob)).toEqual(['inbox/café ☕.txt']);

    // Ann's turn streamed on to its end.
    await until(finished, 60_000);
    const last = conversation.swaps.find((s) => /^#turn-\d+$/.test(s.target) && s.swap === 'outerHTML')!;
    expect(last.html).toContain('slow-done');
    expect(last.html).toContain('The run said:');
    conversation.socket.disconnect();
    expect(stray).toEqual([]);
  }, 300_000);

  it('answers a form that is not multipart, or has no file, with 400', async () => {
    const carol = await ensureUser(gw.gateway.store.db, 'carol');
    const s = await signIn(carol);
    const headers = { cookie: s.cookie, 'x-csrf-token': s.csrf, 'hx-request': 'true' };
    const plain = await fetch(`${gw.url}/files/upload`, { method: 'POST', headers: { ...headers, 'content-type': 'text/plain' }, body: 'just text' });
    expect(plain.status).toBe(400);
    expect(await plain.text()).toMatch(/could not be read/);
    const cut = await fetch(`${gw.url}/files/upload`, { method: 'POST', headers: { ...headers, 'content-type': 'multipart/form-data; boundary=b' }, body: '--b\r\nContent-Disposition: form-data; name="file"; filename="cut.txt"\r\n\r\nno end' });
    expect(cut.status).toBe(400);
    const none = '--b\r\nContent-Disposition: form-data; name="dir"\r\n\r\ninbox\r\n--b--\r\n';
    const noFile = await fetch(`${gw.url}/files/upload`, { method: 'POST', headers: { ...headers, 'content-type': 'multipart/form-data; boundary=b' }, body: none });
    expect(noFile.status).toBe(400);
    expect(await noFile.text()).toMatch(/no file in the upload/);
    expect(await filesOf(carol)).toEqual([]);
    expect(stray).toEqual([]);
  });

  it('removes what a browser that goes away mid-upload had sent', async () => {
    const dora = await ensureUser(gw.gateway.store.db, 'dora');
    const s = await signIn(dora);
    const { body, type } = multipart({ name: 'gone.bin', data: Buffer.alloc(8 * 1024 * 1024, 3) });
    const { port } = new URL(gw.url);
    const req = http.request({ host: '127.0.0.1', port, path: '/files/upload', method: 'POST', headers: { cookie: s.cookie, 'x-csrf-token': s.csrf, 'content-type': type, 'content-length': body.length } });
    req.on('error', () => {});
    // Enough for some of it to be written, then the connection drops.
    req.write(body.subarray(0, 3 * 1024 * 1024));
    const w = await gw.gateway.manager.openWorkspace({ userId: dora.id, name: dora.name });
    const written = async () => (await w.list('', { limit: 10 })).find((e) => e.path === 'gone.bin')?.size ?? 0;
    for (let i = 0; i < 200 && (await written()) === 0; i++) await new Promise((r) => setTimeout(r, 50));
    expect(await written()).toBeGreaterThan(0);
    req.destroy();
    for (let i = 0; i < 200 && (await filesOf(dora)).length; i++) await new Promise((r) => setTimeout(r, 50));
    expect(await filesOf(dora)).toEqual([]);
    expect((await fetch(`${gw.url}/healthz`)).status).toBe(200);
    expect(stray).toEqual([]);
  });
});
