import { afterAll, describe, expect, it } from 'vitest';
import { openTestVault } from '../../test/support/pii.js';
import type { Caller } from '../auth/caller.js';
import type { User } from '../accounts/accounts.js';
import { IDENTITY_BOUNDARY } from './boundary.js';
import { forCall, fromModel, fromModelDeep, textResult, toModelStream, unknownTokensNote, type ToolContext } from '../mcp/context.js';
import { createToken, revokeToken } from '../tokens/tokens.js';
import { createPiiBoundary, dropInactiveTokenScopes } from './pii-boundary.js';

const t = await openTestVault();
afterAll(() => t.cleanup());
const boundary = createPiiBoundary(t.vault);
const ann = { userId: await t.userId('ann'), name: 'ann' };
const bob = { userId: await t.userId('bob'), name: 'bob' };
const laptop = { tokenId: 1, tokenName: 'laptop' };
const phone = { tokenId: 2, tokenName: 'phone' };

/** A caller with an API token, or in a conversation of the agent, or signed in to the web app. */
const viaToken = (owner: typeof ann, p: typeof laptop): Caller => ({ user: { id: owner.userId, name: owner.name } as User, via: { kind: 'token', ...p } });
const viaAgent = (owner: typeof ann, conversationId: string): Caller => ({ user: { id: owner.userId, name: owner.name } as User, via: { kind: 'agent', conversationId } });
const viaSession = (owner: typeof ann): Caller => ({ user: { id: owner.userId, name: owner.name } as User, via: { kind: 'session', sessionId: 's1' } });
const toModel = async (owner: typeof ann, p: typeof laptop, text: string) => boundary.toModel(viaToken(owner, p), text);
const fromModelText = async (owner: typeof ann, p: typeof laptop, text: string) => boundary.fromModel(viaToken(owner, p), text);

/** Just enough of a tool context for the helpers that pass the boundary. */
function contextFor(owner: typeof ann, p: typeof laptop): ToolContext {
  return { boundary, owner, caller: viaToken(owner, p), unknownTokens: new Set() } as unknown as ToolContext;
}

describe('the PII boundary', () => {
  it('gives a value the same token in every call with the same user and API token', async () => {
    const first = await toModel(ann, laptop, 'mail ann.lee@example.com please');
    expect(first).toBe('mail [EMAIL_1] please');
    expect(await toModel(ann, laptop, 'again: ann.lee@example.com')).toBe('again: [EMAIL_1]');
    expect(await fromModelText(ann, laptop, 'send to [EMAIL_1]')).toEqual({ text: 'send to ann.lee@example.com', unknown: [] });
  });

  it('scopes tokens per API token: another token of the same user has its own', async () => {
    expect(await fromModelText(ann, phone, '[EMAIL_1]')).toEqual({ text: '[EMAIL_1]', unknown: ['[EMAIL_1]'] });
    await toModel(ann, phone, 'first zoe.k@example.org then ann.lee@example.com');
    expect(await toModel(ann, phone, 'ann.lee@example.com')).toBe('[EMAIL_2]');
    expect((await fromModelText(ann, phone, '[EMAIL_1]')).text).toBe('zoe.k@example.org');
  });

  it("never resolves one user's token text for another, whatever API token id they present", async () => {
    expect(await fromModelText(bob, laptop, 'x [EMAIL_1] y')).toEqual({ text: 'x [EMAIL_1] y', unknown: ['[EMAIL_1]'] });
    expect(await toModel(bob, laptop, 'bob.r@example.net')).toBe('[EMAIL_1]');
    expect((await fromModelText(bob, laptop, '[EMAIL_1]')).text).toBe('bob.r@example.net');
    expect((await fromModelText(ann, laptop, '[EMAIL_1]')).text).toBe('ann.lee@example.com');
  });

  it('scopes a conversation of the agent apart from every token and every other conversation', async () => {
    const c1 = viaAgent(ann, 'conv-1');
    expect(await boundary.toModel(c1, 'write to ann.lee@example.com')).toBe('write to [EMAIL_1]');
    expect((await boundary.fromModel(c1, '[EMAIL_1]')).text).toBe('ann.lee@example.com');
    expect(await boundary.fromModel(viaAgent(ann, 'conv-2'), '[EMAIL_1]')).toEqual({ text: '[EMAIL_1]', unknown: ['[EMAIL_1]'] });
    expect(await boundary.toModel(viaAgent(ann, 'conv-2'), 'zed@example.com ann.lee@example.com')).toBe('[EMAIL_1] [EMAIL_2]');
    // The same conversation id of another user is another scope.
    expect(await boundary.fromModel(viaAgent(bob, 'conv-1'), '[EMAIL_1]')).toEqual({ text: '[EMAIL_1]', unknown: ['[EMAIL_1]'] });
  });

  it('a person in a browser reads their own data as it is: no model sees that text', () => {
    // No scope, no store: answered at once, not in a Promise.
    expect(boundary.toModel(viaSession(ann), 'mail ann.lee@example.com')).toBe('mail ann.lee@example.com');
    expect(boundary.fromModel(viaSession(ann), '[EMAIL_1]')).toEqual({ text: '[EMAIL_1]', unknown: [] });
  });

  it('streams output without ever sending part of a value, and ends equal to toModel', async () => {
    const text = 'customer Ann Lee <ann.lee@example.com>, card 4111 1111 1111 1111\ndone\n';
    const stream = boundary.toModelStream!(viaToken(ann, laptop));
    // Every character pushed at once, before the scope is even open: the outputs keep their order.
    const sent = await Promise.all([...[...text].map((ch) => stream.push(ch)), stream.end()]);
    expect(sent.join('')).toBe(await toModel(ann, laptop, text));
    for (const piece of sent) expect(piece).not.toMatch(/ann|Lee|4111/);
  });
});

describe('the tool context helpers', () => {
  it('collect unknown tokens per call and note them after the boundary, so they stay as the model wrote them', async () => {
    const ctx = contextFor(ann, laptop);
    const call = forCall(ctx);
    expect(await fromModel(call, 'print("[EMAIL_1]", "[PHONE_7]")')).toBe('print("ann.lee@example.com", "[PHONE_7]")');
    expect(await fromModelDeep(call, { read: ['/workspace/[NAME_4]'], write: true })).toEqual({ read: ['/workspace/[NAME_4]'], write: true });
    expect([...call.unknownTokens]).toEqual(['[PHONE_7]', '[NAME_4]']);
    expect(ctx.unknownTokens.size).toBe(0);
    const result = await textResult(call, 'sent to ann.lee@example.com');
    expect(result.content[0]).toEqual({
      type: 'text',
      text: 'sent to [EMAIL_1]\n\nNote: [PHONE_7] and [NAME_4] are not tokens this conversation knows; they were passed on unchanged.',
    });
    expect((await textResult(forCall(ctx), 'ok')).content[0]).toEqual({ type: 'text', text: 'ok' });
  });

  it('phrase the note for one token and for several', () => {
    expect(unknownTokensNote([])).toBeUndefined();
    expect(unknownTokensNote(['[EMAIL_9]'])).toBe('Note: [EMAIL_9] is not a token this conversation knows; it was passed on unchanged.');
    expect(unknownTokensNote(['[A_1]', '[B_2]', '[C_3]'])).toBe('Note: [A_1], [B_2] and [C_3] are not tokens this conversation knows; they were passed on unchanged.');
  });

  it('pass chunks through each on its own for a boundary without a stream of its own', async () => {
    const ctx = { ...contextFor(ann, laptop), boundary: { ...IDENTITY_BOUNDARY, toModelStream: undefined, toModel: (_c: unknown, s: string) => s.toUpperCase() } };
    const stream = toModelStream(ctx);
    expect(await stream.push('ab')).toBe('AB');
    expect(await stream.end()).toBe('');
  });
});

describe('dropInactiveTokenScopes', () => {
  it('forgets what the clients of revoked and expired tokens were shown, and nothing else', async () => {
    const v = await openTestVault();
    try {
      const carl = { userId: await v.userId('carl'), name: 'carl' };
      const b = createPiiBoundary(v.vault);
      const now = Date.now();
      const kept = (await createToken(v.store.db, { userId: carl.userId, name: 'kept' })).record;
      const revoked = (await createToken(v.store.db, { userId: carl.userId, name: 'revoked' })).record;
      const expired = (await createToken(v.store.db, { userId: carl.userId, name: 'expired', expiresAt: now + 1000 })).record;
      for (const r of [kept, revoked, expired]) await b.toModel(viaToken(carl, { tokenId: r.id, tokenName: r.name }), 'carl@example.com');
      await revokeToken(v.store.db, revoked.id);
      expect(await dropInactiveTokenScopes(v.store.db, v.vault, now)).toBe(1);
      expect(await dropInactiveTokenScopes(v.store.db, v.vault, now + 2000)).toBe(1);
      expect(await dropInactiveTokenScopes(v.store.db, v.vault, now + 2000)).toBe(0);
      const resolves = async (r: typeof kept) => (await b.fromModel(viaToken(carl, { tokenId: r.id, tokenName: r.name }), '[EMAIL_1]')).text;
      expect(await resolves(kept)).toBe('carl@example.com');
      expect(await resolves(revoked)).toBe('[EMAIL_1]');
      expect(await resolves(expired)).toBe('[EMAIL_1]');
    } finally {
      await v.cleanup();
    }
  });

  it('walks the scopes that exist, in batches: drops those of revoked or purged tokens, keeps active ones', async () => {
    const v = await openTestVault();
    try {
      const db = v.store.db;
      const dee = { userId: await v.userId('dee'), name: 'dee' };
      const b = createPiiBoundary(v.vault);
      const active = (await createToken(db, { userId: dee.userId, name: 'active' })).record;
      const purged = (await createToken(db, { userId: dee.userId, name: 'purged' })).record;
      for (const r of [active, purged]) await b.toModel(viaToken(dee, { tokenId: r.id, tokenName: r.name }), 'dee@example.com');
      // More revoked tokens with scopes than one batch holds, and many revoked ones whose scopes are long gone.
      const old = await db
        .insertInto('api_tokens')
        .values(Array.from({ length: 1200 }, (_, i) => ({ user_id: dee.userId, name: 'old', hash: Buffer.from(`old token ${i}`.padEnd(32, '.')), created_at: 1, revoked_at: 2 })))
        .returning('id')
        .execute();
      await db
        .insertInto('pii_scopes')
        .values(old.slice(0, 1100).map((r) => ({ user_id: dee.userId, kind: 'token' as const, ref: String(r.id), created_at: 1 })))
        .execute();
      // Its row goes while its scope stays, as when the vault was off when the token was revoked and purged.
      await db.deleteFrom('api_tokens').where('id', '=', purged.id).execute();
      // A ref that names no token at all is no token's scope either (and no query fails on it).
      await db.insertInto('pii_scopes').values({ user_id: dee.userId, kind: 'token', ref: 'not-a-token-id', created_at: 1 }).execute();
      const tokenScopes = async () => (await db.selectFrom('pii_scopes').select('ref').where('kind', '=', 'token').execute()).map((r) => r.ref);

      expect(await dropInactiveTokenScopes(db, v.vault)).toBe(1102);
      expect(await tokenScopes()).toEqual([String(active.id)]);
      const resolves = async (r: typeof active) => (await b.fromModel(viaToken(dee, { tokenId: r.id, tokenName: r.name }), '[EMAIL_1]')).text;
      expect(await resolves(active)).toBe('dee@example.com');
      expect(await dropInactiveTokenScopes(db, undefined)).toBe(0);
    } finally {
      await v.cleanup();
    }
  });
});
