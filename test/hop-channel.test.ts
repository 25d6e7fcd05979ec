/**
 * The internal hop's run channel on the wire (src/sandboxes/hop-channel.ts, served by
 * src/http/internal.ts's `internalChannel`): a sender's HopChannels against a holder's
 * end on a real HTTP server, with the holder's execution given as the function a
 * gateway gives it. What two real gateways do with it is in test/replicas.test.ts; here,
 * what they cannot easily be made to do: refuse, vanish mid-run, speak an earlier
 * release, or send what is not a frame.
 */
import crypto from 'node:crypto';
import http from 'node:http';
import net from 'node:net';
import type { AddressInfo } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import WebSocket, { WebSocketServer } from 'ws';
import { internalChannel } from '../src/http/internal.js';
import { createLogger } from '../src/logger.js';
import { HopSigner } from '../src/replicas/hop-auth.js';
import { SandboxError } from '../src/sandboxes/errors.js';
import { HOP_CHANNEL_PATH, HopChannels, MAX_RUN_FRAME_BYTES } from '../src/sandboxes/hop-channel.js';
import { HopFailed, HopRefused } from '../src/sandboxes/remote.js';
import type { ExecuteOptions, ExecuteResult, SandboxOwner } from '../src/sandboxes/types.js';
import { until } from './support/until.js';

const KEY = crypto.randomBytes(32);
const log = createLogger('silent');
const owner: SandboxOwner = { userId: 7, name: 'ann' };
const result = (stdout: string): ExecuteResult => ({ exitCode: 0, durationMs: 1, timedOut: false, killed: false, restarted: false, truncated: { stdout: 0, stderr: 0 }, files: [], stdout, stderr: '', language: 'python' });

/** What the holder's execution saw: each run's code and whether its signal was aborted. */
interface Seen {
  code: string;
  signal?: AbortSignal;
}

const servers: http.Server[] = [];
const pools: HopChannels[] = [];
afterEach(async () => {
  for (const p of pools.splice(0)) p.close();
  for (const s of servers.splice(0)) {
    s.closeAllConnections();
    await new Promise((r) => s.close(r));
  }
});

async function listen(server: http.Server): Promise<string> {
  servers.push(server);
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
}

/** A holder: `internalChannel` on a real server, running code as `execute` says. */
async function holder(execute: (code: string, opts: ExecuteOptions) => Promise<ExecuteResult>, key = KEY) {
  const seen: Seen[] = [];
  const upgrades: string[] = [];
  const sockets = new Set<import('node:stream').Duplex>();
  const channel = internalChannel({
    signer: new HopSigner({ key }),
    selfId: 'holder',
    log,
    outputLimitBytes: 1024,
    sandboxes: {
      executeHere: (o, opts) => {
        expect(o).toEqual(owner);
        seen.push({ code: opts.code, signal: opts.signal });
        return execute(opts.code, opts);
      },
      stopUserHere: async () => false,
      removeDeletedWorkspaces: async () => 0,
      workspaceRequestHere: () => Promise.reject(new Error('no file operation travels on the run channel')),
      list: async () => [],
      pooled: () => [],
    },
  });
  const server = http.createServer((_req, res) => res.writeHead(404).end());
  server.on('upgrade', (req, socket, head) => {
    upgrades.push(req.url ?? '');
    sockets.add(socket);
    if (!channel.take(req, socket, head)) socket.destroy();
  });
  const url = await listen(server);
  return { url, seen, upgrades, cut: () => sockets.forEach((s) => s.destroy()) };
}

function sender(): HopChannels {
  const p = new HopChannels({ signer: new HopSigner({ key: KEY }), selfId: 'sender', outputLimitBytes: 1024 });
  pools.push(p);
  return p;
}

const run = (pool: HopChannels, url: string, code: string, extra: Partial<ExecuteOptions> = {}) => pool.run({ id: 'holder', internalUrl: url }, owner, { language: 'python', code, ...extra }, 30);

describe('the run channel', () => {
  it('carries many runs on one connection, their output streamed and kept within the limit', async () => {
    const h = await holder(async (code, opts) => {
      opts.onOutput?.('stdout', `out of ${code}\n`);
      if (code === 'big') opts.onOutput?.('stdout', 'x'.repeat(5000));
      await new Promise((r) => setTimeout(r, 20));
      return result(`${code} done\n`);
    });
    const pool = sender();
    const streamed: string[] = [];
    const answers = await Promise.all(['a', 'b', 'c', 'big'].map((code) => run(pool, h.url, code, { onOutput: (_s, d) => streamed.push(d) })));
    expect(answers.map((r) => r?.stdout)).toEqual(['a done\n', 'b done\n', 'c done\n', 'big done\n']);
    expect(streamed.sort()).toEqual(['out of a\n', 'out of b\n', 'out of big\n', 'out of c\n']);
    // Past this gateway's output limit: not passed on.
    expect(streamed.join('')).not.toContain('xxxx');
    expect((await run(pool, h.url, 'd'))?.stdout).toBe('d done\n');
    expect(h.upgrades).toEqual([HOP_CHANNEL_PATH]);
  });

  it("throws the holder's refusal as it was, and a holder that lost the sandbox as HopRefused", async () => {
    const h = await holder(async (code) => {
      if (code === 'elsewhere') throw new SandboxError('held by another gateway', 'held_elsewhere');
      throw new SandboxError('too much code', 'invalid_request');
    });
    const pool = sender();
    await expect(run(pool, h.url, 'elsewhere')).rejects.toBeInstanceOf(HopRefused);
    await expect(run(pool, h.url, 'bad')).rejects.toMatchObject({ reason: 'invalid_request', message: 'too much code' });
  });

  it('ends a run cut off mid-way as interrupted, with the output that came, and opens a new channel for the next', async () => {
    let started!: () => void;
    const begun = new Promise<void>((r) => (started = r));
    const h = await holder(async (code, opts) => {
      if (code === 'long') {
        opts.onOutput?.('stdout', 'started\n');
        started();
        await new Promise((r) => setTimeout(r, 60_000));
      }
      return result('quick\n');
    });
    const pool = sender();
    const long = run(pool, h.url, 'long');
    await begun;
    await new Promise((r) => setTimeout(r, 50));
    h.cut();
    const cut = await long;
    expect(cut).toMatchObject({ exitCode: null, killed: true, stdout: 'started\n' });
    expect(cut!.notice).toMatch(/went away[\s\S]*Whether the code ran to its end is not known/);
    // The holder aborts the run its sender left.
    await until(() => h.seen[0]!.signal!.aborted);
    expect((await run(pool, h.url, 'next'))?.stdout).toBe('quick\n');
    expect(h.upgrades).toHaveLength(2);
  });

  it("cancels a run on the holder when the caller does", async () => {
    const h = await holder(async (_code, opts) => {
      await new Promise((r) => opts.signal!.addEventListener('abort', r));
      return result('');
    });
    const pool = sender();
    const caller = new AbortController();
    const r = run(pool, h.url, 'wait', { signal: caller.signal });
    await new Promise((r) => setTimeout(r, 100));
    caller.abort();
    expect((await r)!.notice).toBe('The run was cancelled.');
    await until(() => h.seen[0]!.signal!.aborted);
  });

  it('asks again through the store for a run the holder never said it took, and never for one it did', async () => {
    // A holder that goes as the run arrives, before a word about it: nothing ran there.
    const wss = new WebSocketServer({ noServer: true });
    const vanishing = http.createServer();
    vanishing.on('upgrade', (req, socket, head) => wss.handleUpgrade(req, socket, head, (ws) => ws.on('message', () => ws.terminate())));
    await expect(run(sender(), await listen(vanishing), 'x')).rejects.toBeInstanceOf(HopRefused);
    // One that reads the run and goes quiet, its connection still up (a network that drops one way):
    // it may be running it, so the run is interrupted, never asked again elsewhere.
    const swallowing = http.createServer();
    swallowing.on('upgrade', (req, socket, head) => wss.handleUpgrade(req, socket, head, () => undefined));
    const quietPool = new HopChannels({ signer: new HopSigner({ key: KEY }), selfId: 'sender', outputLimitBytes: 1024, silenceMs: 300 });
    pools.push(quietPool);
    const quiet = await run(quietPool, await listen(swallowing), 'x');
    expect(quiet).toMatchObject({ exitCode: null, killed: true });
    expect(quiet!.notice).toMatch(/was silent for 0.3 s/);
    // One that said it took the run, then went: interrupted, never run a second time.
    const h = await holder(async (_code, opts) => {
      setTimeout(() => h.cut(), 50);
      await new Promise((r) => opts.signal!.addEventListener('abort', r));
      return result('');
    });
    const r = await run(sender(), h.url, 'quiet');
    expect(r).toMatchObject({ exitCode: null, killed: true, stdout: '' });
    expect(h.seen).toHaveLength(1);
  });

  it('falls back to HTTP for a replica of an earlier release, and says why it cannot reach the others', async () => {
    const pool = sender();
    // An earlier release: no channel, a 404 for the upgrade.
    const earlier = await listen(http.createServer((_req, res) => res.writeHead(404).end()));
    expect(await run(pool, earlier, 'x')).toBeUndefined();
    // Another installation's key: refused, a setting that differs.
    const stranger = await holder(async () => result(''), crypto.randomBytes(32));
    await expect(run(pool, stranger.url, 'x')).rejects.toBeInstanceOf(HopFailed);
    expect(stranger.seen).toHaveLength(0);
    // No one there: nothing ran, ask the store again.
    const closed = http.createServer();
    await new Promise<void>((r) => closed.listen(0, '127.0.0.1', r));
    const deadUrl = `http://127.0.0.1:${(closed.address() as AddressInfo).port}`;
    await new Promise((r) => closed.close(r));
    await expect(run(pool, deadUrl, 'x')).rejects.toBeInstanceOf(HopRefused);
  });

  it('ends the channel on a frame that is not sealed in its place, from either end', async () => {
    // A holder that answers with something not sealed under the key.
    const wss = new WebSocketServer({ noServer: true });
    const fake = http.createServer();
    fake.on('upgrade', (req, socket, head) => wss.handleUpgrade(req, socket, head, (ws) => ws.on('message', () => ws.send(Buffer.from('{"id":1,"line":{"t":"done"}}')))));
    const url = await listen(fake);
    // Given up on here: whether the holder runs it is not known, so it is interrupted, not sent elsewhere.
    const r = await run(sender(), url, 'x');
    expect(r).toMatchObject({ exitCode: null, killed: true });
    expect(r!.notice).toMatch(/not the hop’s answer \(or not sealed with this installation’s key\)/);

    // A sender whose frame is replayed (or out of place): the holder ends the channel, and runs it once.
    const h = await holder(async (code) => result(code));
    const signer = new HopSigner({ key: KEY });
    const { header, nonce } = signer.signRequest('sender', 'holder', HOP_CHANNEL_PATH, '');
    const ws = new WebSocket(`${h.url.replace('http', 'ws')}${HOP_CHANNEL_PATH}`, { headers: { 'sandgate-hop': header } });
    await new Promise((r) => ws.once('open', r));
    const frames: Buffer[] = [];
    ws.on('message', (d) => frames.push(d as Buffer));
    const closed = new Promise((r) => ws.once('close', r));
    const frame = signer.channel(nonce).seal('sender', 0, JSON.stringify({ k: 'run', id: 1, run: { owner, language: 'python', code: 'once' } }));
    ws.send(frame);
    await new Promise((r) => setTimeout(r, 200));
    ws.send(frame);
    await closed;
    expect(h.seen.map((s) => s.code)).toEqual(['once']);
    expect(JSON.parse(signer.channel(nonce).open('holder', frames.length - 1, frames.at(-1)!))).toMatchObject({ id: 1, line: { t: 'done', r: { stdout: 'once' } } });
    // Nothing of the answer in clear on the wire.
    expect(Buffer.concat(frames).toString('latin1')).not.toMatch(/stdout|once/);

    // One sealed as the holder's own, sent back to it: refused the same way.
    const second = signer.signRequest('sender', 'holder', HOP_CHANNEL_PATH, '');
    const ws2 = new WebSocket(`${h.url.replace('http', 'ws')}${HOP_CHANNEL_PATH}`, { headers: { 'sandgate-hop': second.header } });
    await new Promise((r) => ws2.once('open', r));
    const closed2 = new Promise((r) => ws2.once('close', r));
    ws2.send(signer.channel(second.nonce).seal('holder', 0, JSON.stringify({ k: 'run', id: 1, run: { owner, language: 'python', code: 'reflected' } })));
    await closed2;
    expect(h.seen.map((s) => s.code)).toEqual(['once']);
    // The first credential again: refused before any channel opens.
    const replayed = new WebSocket(`${h.url.replace('http', 'ws')}${HOP_CHANNEL_PATH}`, { headers: { 'sandgate-hop': header } });
    const status = await new Promise<number>((r) => {
      replayed.once('unexpected-response', (_q, res) => r(res.statusCode ?? 0));
      replayed.once('open', () => r(101));
    });
    expect(status).toBe(401);
  });

  it("keeps one user's oversized answer or run to that run, never the channel other users' runs are on", async () => {
    const h = await holder(async (code) => {
      if (code !== 'many files') return result(`${code} done\n`);
      // A thousand long names of control characters: six bytes each in JSON, far past a frame.
      const files = Array.from({ length: 1000 }, (_, i) => ({ path: `/workspace/${'\u0001'.repeat(4000)}${i}`, size: 1, change: 'added' }));
      return { ...result('wrote\n'), files } as ExecuteResult;
    });
    const pool = sender();
    const [big, other] = await Promise.all([run(pool, h.url, 'many files'), run(pool, h.url, 'another user')]);
    expect(big).toMatchObject({ exitCode: 0, stdout: 'wrote\n', files: [] });
    expect(big!.notice).toMatch(/list of files the run changed was too long/);
    expect(other?.stdout).toBe('another user done\n');
    // A run too large for the holder to take is refused here, for itself alone.
    await expect(run(pool, h.url, '\u0001'.repeat(MAX_RUN_FRAME_BYTES / 5))).rejects.toMatchObject({ reason: 'invalid_request' });
    expect((await run(pool, h.url, 'after'))?.stdout).toBe('after done\n');
    expect(h.upgrades).toHaveLength(1);
  });

  it('takes only its exact path, and closes a refused upgrade whatever the other side does', async () => {
    const h = await holder(async () => result(''));
    const port = Number(new URL(h.url).port);
    /** Sends `target` as an upgrade and keeps its side open; resolves with what came back once the holder closed. */
    const upgrade = (target: string) =>
      new Promise<{ text: string; closedMs: number }>((resolve) => {
        const t0 = Date.now();
        let text = '';
        const s = net.connect(port, '127.0.0.1', () => s.write(`GET ${target} HTTP/1.1\r\nHost: x\r\nConnection: upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: ${crypto.randomBytes(16).toString('base64')}\r\nsandgate-hop: x.y\r\n\r\n`));
        s.on('data', (d) => (text += d));
        s.on('error', () => undefined);
        s.on('close', () => resolve({ text, closedMs: Date.now() - t0 }));
      });
    // A bad credential: 401, and the socket is closed by the holder although the client never ends its side.
    const refused = await upgrade(HOP_CHANNEL_PATH);
    expect(refused.text).toMatch(/^HTTP\/1\.1 401/);
    expect(refused.closedMs).toBeLessThan(5000);
    // Not the path as sent (dot segments, escapes, an absolute target): not the channel's, left to the caller (here: cut).
    for (const target of ['/socket.io/../internal/v3/channel', '/x/%2e%2e/internal/v3/channel', 'http://a:99999/', `${HOP_CHANNEL_PATH}/`]) {
      expect((await upgrade(target)).text).toBe('');
    }
    expect(h.seen).toHaveLength(0);
  });
});

