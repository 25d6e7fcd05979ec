/**
 * The typed handle every domain queries through: Kysely over the store's database,
 * whichever it is. `Tables` names every table and its columns; it is empty here because
 * each domain declares its own tables beside their migrations, in its schema.ts:
 *
 *     declare module '../store/tables.js' {
 *       interface Tables { users: UsersTable }
 *     }
 *
 * so the store knows no domain while every query in every domain is checked against
 * the columns it names.
 */
import type { Kysely, Transaction } from 'kysely';

// Filled by declaration merging (see above); an interface, not a type, so it can be.
// eslint-disable-next-line @typescript-eslint/no-empty-object-type
export interface Tables {}

/** The store's database, for queries. */
export type Db = Kysely<Tables>;
/** A transaction on it (also a Db: queries run inside the transaction). */
export type Tx = Transaction<Tables>;

/** Which database a store is: the embedded file, or a Postgres server. */
export type Dialect = 'sqlite' | 'postgres';
