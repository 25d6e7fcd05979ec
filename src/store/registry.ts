/**
 * The store's complete schema: every module's migration, in version order. The
 * gateway, the CLI and the test harness open the store with ALL_MIGRATIONS.
 */
import { auditMigration } from '../audit/schema.js';
import { piiBatchesMigration, piiMigration } from '../pii/schema.js';
import { tokensMigration } from '../tokens/schema.js';
import { UPSTREAM_IDENTITIES_MIGRATION } from '../upstream/identities.js';
import { UPSTREAM_MIGRATION } from '../upstream/schema.js';
import { MIGRATIONS, type Migration } from './migrations.js';

export const ALL_MIGRATIONS: readonly Migration[] = [
  ...MIGRATIONS,
  piiMigration,
  tokensMigration,
  auditMigration,
  UPSTREAM_MIGRATION,
  piiBatchesMigration,
  UPSTREAM_IDENTITIES_MIGRATION,
];
