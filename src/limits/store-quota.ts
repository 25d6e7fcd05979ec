/**
 * Each user's share of the store (SANDGATE_STORE_QUOTA_MB): the messages of their
 * conversations (web chat and /v1, with the file lists and titles) and the personal data
 * tokenized for them in the PII vault (for their conversations and for the clients of
 * their tokens). The audit log is the gateway's record, not the
 * user's, and the workspace has its own limit (SANDGATE_WORKSPACE_MB); neither counts.
 *
 * The quota is checked before anything new is stored: a request that would go past it
 * is refused and stores nothing, and nothing stored is ever removed to make room. A turn
 * that is running may go past it by its own tool output; the next request is refused.
 * The sizes are running totals the store keeps with triggers (schema.ts), so a check
 * reads four rows however much is stored, and deleting a conversation frees its room at
 * once. Requests in flight hold what they said they would store (reserveStoreRoom), so
 * a burst of them cannot all pass the same check.
 */
import type { Config } from '../config.js';
import { GatewayError } from '../errors.js';
import { formatBytes } from '../text.js';
import type { Db } from '../store/store.js';

export interface StoreUsage {
  /** Web chats. */
  web: number;
  /** Conversations of the /v1 API. */
  api: number;
  /** Sealed personal data of the PII vault tokenized in the user's conversations. */
  personalData: number;
  /** Sealed personal data of the PII vault tokenized for the clients of the user's API tokens. */
  tokenPersonalData: number;
  total: number;
  /** SANDGATE_STORE_QUOTA_MB in bytes. */
  quota: number;
}

/** What the store holds for `userId`, in bytes, against their quota. */
export async function storeUsage(db: Db, config: Pick<Config, 'storeQuotaMb'>, userId: number): Promise<StoreUsage> {
  const rows = await db.selectFrom('store_usage').select(['kind', 'bytes']).where('user_id', '=', userId).execute();
  const bytes = (kind: string) => rows.find((r) => r.kind === kind)?.bytes ?? 0;
  const [web, api, personalData, tokenPersonalData] = [bytes('web'), bytes('api'), bytes('pii_conversation'), bytes('pii_token')];
  return { web, api, personalData, tokenPersonalData, total: web + api + personalData + tokenPersonalData, quota: config.storeQuotaMb * 1024 * 1024 };
}

/** Bytes that requests in flight said they would store, per store and user, until they end. */
const reserved = new WeakMap<Db, Map<number, number>>();

/** A request would take a user past SANDGATE_STORE_QUOTA_MB; nothing of it was stored. */
export class StoreQuotaExceeded extends GatewayError {
  override name = 'StoreQuotaExceeded';
  constructor(
    message: string,
    readonly usage: StoreUsage,
  ) {
    super(message, { reason: 'store_quota_exceeded', status: 403 });
  }
}

/**
 * Throws StoreQuotaExceeded when storing `incoming` more bytes for `userId` would take
 * them past their quota, counting what their other requests in flight have reserved.
 * Otherwise reserves `incoming` until the returned function is called, which the caller
 * does when its request ends (calling it again does nothing). While both stored and
 * reserved, a request's bytes count twice: the check errs towards refusing. The
 * message says what is stored, the setting, and where to delete (pages under
 * `publicUrl`).
 *
 * The room is taken, and what the user's other requests hold is noted, before the totals
 * are read: a request that ended before then has its bytes in the totals, one still
 * running then counts by its room (perhaps twice), and one that starts meanwhile sees
 * this one's.
 */
export async function reserveStoreRoom(
  db: Db,
  config: Pick<Config, 'storeQuotaMb' | 'apiConversationDays' | 'piiTtlHours' | 'publicUrl'>,
  userId: number,
  incoming: number,
): Promise<() => void> {
  let inFlight = reserved.get(db);
  if (!inFlight) reserved.set(db, (inFlight = new Map<number, number>()));
  const held = inFlight.get(userId) ?? 0;
  inFlight.set(userId, held + incoming);
  let released = false;
  const release = () => {
    if (released) return;
    released = true;
    const left = (inFlight.get(userId) ?? 0) - incoming;
    if (left > 0) inFlight.set(userId, left);
    else inFlight.delete(userId);
  };
  let usage: StoreUsage;
  try {
    usage = await storeUsage(db, config, userId);
  } catch (e) {
    release();
    throw e;
  }
  if (usage.total + held + incoming <= usage.quota) return release;
  release();
  const base = config.publicUrl.replace(/\/$/, '');
  const parts = [`chats ${formatBytes(usage.web)}`, `API conversations ${formatBytes(usage.api)}`, `personal data tokenized in them ${formatBytes(usage.personalData)}`];
  if (usage.tokenPersonalData) {
    parts.push(`personal data tokenized for your tokens' clients ${formatBytes(usage.tokenPersonalData)}, forgotten ${config.piiTtlHours} hours after its last use or when the token is revoked`);
  }
  const expiry = config.apiConversationDays > 0 ? ` (API conversations are also deleted ${config.apiConversationDays} days after their last message, SANDGATE_API_CONVERSATION_DAYS)` : '';
  throw new StoreQuotaExceeded(
    `Your stored conversations take ${formatBytes(usage.total)} (${parts.join(', ')}) of your ${formatBytes(usage.quota)} quota (SANDGATE_STORE_QUOTA_MB=${config.storeQuotaMb}), ` +
      `${held ? `your requests still running will store up to ${formatBytes(held)} more, ` : ''}and this would store ${formatBytes(incoming)} more, so nothing was stored. ` +
      `Delete conversations you no longer need: chats at ${base}/chat, API conversations at ${base}/tokens${expiry}. An operator can raise SANDGATE_STORE_QUOTA_MB.`,
    usage,
  );
}
