/**
 * Who each stdio upstream connection runs as: a uid of its own, never root and never
 * another connection's, so a server (holding, say, one user's GitHub token) can neither
 * read another server's home and files nor trace or signal its processes. A connection
 * keeps its uid across restarts (its home belongs to it), so the mapping is stored.
 *
 * The uids start at UPSTREAM_UID_BASE, far above any range a distribution or a container
 * runtime hands out; they need no entry in /etc/passwd. Each gateway on a host (one per
 * data directory) takes its own block of 65,536 from its id, so two gateways' servers
 * never share a uid (unless their ids share the first three hex digits: 1 in 4,096).
 */
import type { Db } from '../store/store.js';

export const UPSTREAM_UID_BASE = 1_500_000_000;
const BLOCK = 65_536;

/** The first uid of a gateway's block, from its id (src/sandboxes: gatewayIdFor). */
export function uidBlockOf(gatewayId: string): number {
  return UPSTREAM_UID_BASE + (parseInt(gatewayId.slice(0, 3), 16) || 0) * BLOCK;
}

export interface UpstreamIdentity {
  uid: number;
  gid: number;
}

/**
 * The identity of a connection, made on its first use, in the gateway's block (`uidBlockOf`).
 * The row is looked up first and only added when missing: on Postgres every insert
 * attempt takes a number from the id sequence, even one that finds the row there, and
 * the block has room for 65,536 ids. Two gateways (or two requests) adding the same
 * connection at once both end up reading the one row the unique index lets in.
 */
export async function upstreamIdentity(db: Db, connection: string, block: number): Promise<UpstreamIdentity> {
  const find = () => db.selectFrom('upstream_identities').select('id').where('connection', '=', connection).executeTakeFirst();
  let row = await find();
  if (!row) {
    row =
      (await db
        .insertInto('upstream_identities')
        .values({ connection })
        .onConflict((oc) => oc.column('connection').doNothing())
        .returning('id')
        .executeTakeFirst()) ?? (await find());
  }
  if (!row) throw new Error(`the uid of upstream connection ${connection} could not be stored`);
  if (row.id >= BLOCK) throw new Error(`more than ${BLOCK} upstream connections have been given a uid; remove old rows from upstream_identities`);
  const uid = block + row.id;
  return { uid, gid: uid };
}
