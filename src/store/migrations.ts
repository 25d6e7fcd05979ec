/**
 * A step of the store's schema. Modules define their steps beside the code that uses
 * the tables; src/migrations.ts lists every step in order, and a step's place in that
 * list (from 1) is its version: the one place where order and versions live.
 *
 * A step is written once per database, as the SQL statements that make the change there
 * (fixed text, never assembled from input): both databases end each step with the same
 * tables, columns, keys and behaviour, which src/store/schema-parity.test.ts checks.
 * Pending steps run together in one transaction, under a lock, with the version bump.
 */
export interface Migration {
  description: string;
  /** The step on SQLite (the embedded database). */
  sqlite: string;
  /** The same step on Postgres. */
  postgres: string;
}
