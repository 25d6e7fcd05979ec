/**
 * The live channel's one table: `live_attachments`, where socket.io's Postgres adapter
 * (@socket.io/postgres-adapter) puts a message too large for a NOTIFY (over 8,000 bytes:
 * a rendered turn often is) for the other gateways to read. The adapter writes, reads and
 * purges it (rows older than its cleanup interval, 30 s); nothing else touches it.
 *
 * The adapter does not create its table, and gateways of a tier start side by side, so
 * it is made here, by the migration every gateway already takes a lock for, rather than
 * by a CREATE at start that several gateways would race. Its columns are the ones the
 * adapter's queries name (`id`, `created_at` compared with now(), `payload`).
 *
 * SQLite has the table too, always empty: one process needs no adapter, and one schema on
 * both databases keeps the parity check and `sandgate db copy` free of exceptions.
 */
import type { Migration } from '../../store/migrations.js';

declare module '../../store/tables.js' {
  interface Tables {
    live_attachments: LiveAttachmentsTable;
  }
}

/** The table's name, as the hub hands it to the adapter (its `tableName`). */
export const LIVE_ATTACHMENTS_TABLE = 'live_attachments';

export interface LiveAttachmentsTable {
  id: number;
  /** A timestamp of the database's own (the adapter's purge compares it with now()). */
  created_at: string;
  /** The message, MessagePack-encoded by the adapter. */
  payload: Buffer;
}

export const liveAttachmentsMigration: Migration = {
  description: 'large live updates on their way between gateways',
  sqlite: `
      CREATE TABLE live_attachments (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        created_at TEXT NOT NULL DEFAULT CURRENT_TIMESTAMP,
        payload BLOB NOT NULL
      );
    `,
  postgres: `
      CREATE TABLE live_attachments (
        id BIGSERIAL PRIMARY KEY,
        created_at TIMESTAMPTZ NOT NULL DEFAULT now(),
        payload BYTEA NOT NULL
      );
    `,
};
