/**
 * A step of the store's schema. Modules define their steps beside the code that uses
 * the tables; src/migrations.ts lists every step in order, and a step's place in
 * that list (from 1) is its version: the one place where order and versions live.
 * Each runs in a transaction with the user_version bump.
 */
import type Database from 'better-sqlite3';

export interface Migration {
  description: string;
  up(db: Database.Database): void;
}
