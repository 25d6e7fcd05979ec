/**
 * What deleting a long conversation costs the gateway's event loop, and what the store
 * quota's check costs, on a real SQLite store (its own temporary file):
 *
 * 1. A conversation of BENCH_MESSAGES messages (50,000 by default: a member can build
 *    one over /v1) deleted in one statement (`deleteConversation`) and in steps
 *    (`deleteConversationInSteps`, what the chat's Delete does): the longest time the
 *    event loop was held, and the whole time.
 * 2. `storeUsage` for a user with that many messages (the store keeps running totals).
 *
 *   node --import tsx bench/store-deletes.ts
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { monitorEventLoopDelay, performance } from 'node:perf_hooks';
import { addMessage, createConversation, deleteConversation, deleteConversationInSteps } from '../src/agent/conversations.js';
import { storeUsage } from '../src/limits/store-quota.js';
import { openStore } from '../src/store/store.js';
import { MIGRATIONS } from '../src/migrations.js';
import { ensureUser } from '../src/accounts/accounts.js';

const MESSAGES = Number(process.env.BENCH_MESSAGES ?? 50_000);
const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sandgate-bench-store-'));
const store = await openStore({ dataDir: dir }, MIGRATIONS);
const db = store.db;
const user = await ensureUser(db, 'bench');

async function fill(): Promise<string> {
  const c = await createConversation(db, { userId: user.id, model: 'openai:gpt-test', source: 'api' });
  await db.transaction().execute(async (tx) => {
    for (let i = 0; i < MESSAGES; i++) await addMessage(tx, { conversationId: c.id, message: { role: i % 2 ? 'assistant' : 'user', content: `message ${i} ${'x'.repeat(40)}` } });
  });
  return c.id;
}

/** Runs `fn` while sampling the event loop's delay every millisecond: the longest hold and the whole time. */
async function held(fn: () => unknown): Promise<{ worstMs: number; totalMs: number }> {
  const h = monitorEventLoopDelay({ resolution: 1 });
  h.enable();
  // A timer due every millisecond: how late it fires is how long the loop was held.
  let last = performance.now();
  let worst = 0;
  const tick = setInterval(() => {
    const now = performance.now();
    worst = Math.max(worst, now - last);
    last = now;
  }, 1);
  await new Promise((r) => setTimeout(r, 5));
  last = performance.now();
  const start = performance.now();
  await fn();
  const totalMs = performance.now() - start;
  await new Promise((r) => setTimeout(r, 5));
  clearInterval(tick);
  h.disable();
  return { worstMs: Math.max(worst, h.max / 1e6), totalMs };
}

const fmt = (n: number) => `${n.toFixed(1)} ms`;
const first = await fill();
const one = await held(() => deleteConversation(db, user.id, first));
const second = await fill();
const steps = await held(() => deleteConversationInSteps(db, user.id, second));
await fill();
const t = performance.now();
const N = 1000;
for (let i = 0; i < N; i++) await storeUsage(db, { storeQuotaMb: 256 }, user.id);
const usageUs = ((performance.now() - t) / N) * 1000;

console.log(`deleting a conversation of ${MESSAGES.toLocaleString('en')} messages`);
console.log(`  one statement:  loop held up to ${fmt(one.worstMs)}, ${fmt(one.totalMs)} in all`);
console.log(`  in steps:       loop held up to ${fmt(steps.worstMs)}, ${fmt(steps.totalMs)} in all`);
console.log(`storeUsage with ${MESSAGES.toLocaleString('en')} messages stored: ${usageUs.toFixed(1)} µs a call`);
await store.close();
fs.rmSync(dir, { recursive: true, force: true });
