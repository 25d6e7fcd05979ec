import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { afterEach, describe, expect, it } from 'vitest';
import { openTestVault, type TestVault } from '../../test/support/pii.js';
import { VaultMemory, type RememberedValue, type ScopeMemory } from './vault-memory.js';

setFlagsFromString('--expose-gc');
const gc = runInNewContext('gc') as () => void;

/**
 * Collects until `done` holds, at most 50 times. Finalizers run on a later turn, and a
 * WeakRef read keeps its target until the turn ends, so each collection gets its own turn.
 */
async function collectUntil(done: () => boolean): Promise<boolean> {
  const tick = () => new Promise((r) => setTimeout(r, 5));
  for (let i = 0; i < 50; i++) {
    await tick();
    gc();
    await tick();
    if (done()) return true;
  }
  return false;
}

function fill(m: ScopeMemory, n: number, prefix: string): void {
  for (let i = 1; i <= n; i++) m.remember({ value: `${prefix}${i}@example.com`, token: `[EMAIL_${i}]`, type: 'EMAIL', n: i, lastUsedAt: 0 } as RememberedValue);
  m.loaded = true;
}

describe('VaultMemory', () => {
  it('keeps at most its number of scopes past their use, letting go of the least recently used', () => {
    const memory = new VaultMemory({ values: 1_000, scopes: 3 });
    const ms = [1, 2, 3, 4, 5].map((id) => {
      const m = memory.forScope(id, `u:${id}`);
      fill(m, 1, `s${id}-`);
      return m;
    });
    expect(memory.sizes().kept).toBe(3);
    // The two oldest were let go and unloaded; the newest three are as they were.
    expect(ms.map((m) => m.loaded)).toEqual([false, false, true, true, true]);
    // Still held here, so opening them again gives the same objects: never two copies of one scope.
    expect(memory.forScope(1, 'u:1')).toBe(ms[0]);
    expect(memory.forScope(2, 'u:2')).toBe(ms[1]);
    expect(memory.sizes().kept).toBe(3);
    expect(ms[2]!.loaded).toBe(false);
  });

  it('keeps at most its number of values, unloading the least recently used scopes first', () => {
    const memory = new VaultMemory({ values: 10, scopes: 100 });
    const a = memory.forScope(1, 'u:1');
    fill(a, 6, 'a');
    const b = memory.forScope(2, 'u:2');
    fill(b, 6, 'b');
    memory.forScope(3, 'u:3');
    expect(a.loaded).toBe(false);
    expect(b.loaded).toBe(true);
    // The scope being opened is never the one unloaded, however large.
    const c = memory.forScope(3, 'u:3');
    fill(c, 20, 'c');
    expect(memory.forScope(3, 'u:3')).toBe(c);
    expect(c.loaded).toBe(true);
    expect(b.loaded).toBe(false);
  });

  it('forgets a scope let go once nothing holds it, and the next use starts from the database', async () => {
    const memory = new VaultMemory({ values: 1_000, scopes: 2 });
    let first: ScopeMemory | undefined = memory.forScope(1, 'u:1');
    fill(first, 3, 'x');
    const gone = new WeakRef(first);
    first = undefined;
    memory.forScope(2, 'u:2');
    memory.forScope(3, 'u:3');
    expect(memory.sizes()).toEqual({ kept: 2, known: 3 });
    expect(await collectUntil(() => gone.deref() === undefined && memory.sizes().known === 2)).toBe(true);
    const again = memory.forScope(1, 'u:1');
    expect(again.loaded).toBe(false);
    expect(again.byValue.size).toBe(0);
  });

  it('a million conversations leave only the kept ones behind', async () => {
    const memory = new VaultMemory({ values: 1_000, scopes: 100 });
    for (let id = 1; id <= 200_000; id++) fill(memory.forScope(id, `c:${id}`), 1, `v${id}-`);
    expect(memory.sizes().kept).toBe(100);
    expect(await collectUntil(() => memory.sizes().known === 100)).toBe(true);
  });

  it('an id taken by another owner (a dropped scope) retires the memory its old holders have', () => {
    const memory = new VaultMemory();
    const old = memory.forScope(7, 'u:1:token:a');
    fill(old, 2, 'o');
    const fresh = memory.forScope(7, 'u:2:token:b');
    expect(fresh).not.toBe(old);
    expect(old.retired).toBe(true);
    expect(old.byValue.size).toBe(0);
  });

  it('forgetScope retires a memory still held after it was let go', () => {
    const memory = new VaultMemory({ values: 1_000, scopes: 1 });
    const held = memory.forScope(1, 'u:1');
    memory.forScope(2, 'u:2');
    memory.forgetScope(1);
    expect(held.retired).toBe(true);
    expect(memory.forScope(1, 'u:1')).not.toBe(held);
  });

  it('a memory made for one turn from outside a request is let go after it, and shared during it', async () => {
    const memory = new VaultMemory();
    let during: ScopeMemory | undefined;
    await memory.inTurn(4, 'u:4', async (m) => {
      during = m;
      expect(memory.sizes().known).toBe(1);
    });
    expect(during!.handedOut).toBe(false);
    expect(memory.sizes()).toEqual({ kept: 0, known: 0 });
    // One a request holds stays the scope's memory through the turn and after.
    const held = memory.forScope(5, 'u:5');
    await memory.inTurn(5, 'u:5', async (m) => expect(m).toBe(held));
    expect(memory.forScope(5, 'u:5')).toBe(held);
  });
});

describe('PiiVault memory over many conversations', () => {
  let t: TestVault | undefined;
  afterEach(async () => {
    await t?.cleanup();
    t = undefined;
  });

  it('stays bounded, and a conversation let go gets its own tokens back from the database', async () => {
    t = await openTestVault({ memoryLimits: { values: 1_000, scopes: 5 } });
    const userId = await t.userId('many');
    const first = await t.vault.scope({ userId, kind: 'conversation', id: 'c0' });
    const { text: before } = await first.tokenize('Mail ann.lee@example.com please.');
    for (let i = 1; i <= 40; i++) {
      const s = await t.vault.scope({ userId, kind: 'conversation', id: `c${i}` });
      await s.tokenize(`Mail person${i}@example.com please.`);
    }
    expect(t.vault.memorySizes().kept).toBe(5);
    expect(await collectUntil(() => t!.vault.memorySizes().known <= 6)).toBe(true);
    // The first conversation was let go (its PiiScope `first` still exists here and shares it).
    const again = await t.vault.scope({ userId, kind: 'conversation', id: 'c0' });
    expect((await again.tokenize('Mail ann.lee@example.com please.')).text).toBe(before);
    expect((await again.detokenize(before)).text).toBe('Mail ann.lee@example.com please.');
    expect((await first.detokenize(before)).text).toBe('Mail ann.lee@example.com please.');
  });
});
