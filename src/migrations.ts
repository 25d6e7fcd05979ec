/**
 * The store's complete schema: every module's migration step, in order. A step's
 * version is its place in this list (from 1), so the list is append-only: never remove,
 * reorder or edit a step that has shipped; add a new one at the end. The gateway, the
 * CLI and the tests all open the store with this list (openStore(dir, MIGRATIONS)).
 */
import { agentMigration, apiHistoryMigration, renderedAnswersMigration, turnsReplicaMigration } from './agent/schema.js';
import { auditCallersMigration, auditEgressMigration, auditMigration } from './audit/schema.js';
import { piiBatchesMigration, piiMigration } from './pii/schema.js';
import { tokensActiveIndexMigration, tokensMigration } from './tokens/schema.js';
import { UPSTREAM_IDENTITIES_MIGRATION, UPSTREAM_MIGRATION } from './upstream/schema.js';
import type { Migration } from './store/migrations.js';
import { githubIdentityMigration, usersMigration } from './accounts/schema.js';
import { anonymousSessionsMigration, webMigration } from './auth/schema.js';
import { adminMigration } from './accounts/admin-schema.js';
import { rateBucketsMigration, rateBucketsUnloggedMigration, storeUsageMigration } from './limits/schema.js';
import { replicasMigration, workspaceDeletionsMigration, workspaceHomesMigration } from './replicas/schema.js';
import { liveAttachmentsMigration } from './web/live/schema.js';
import { oauthMigration } from './oauth/schema.js';
import { tasksMigration } from './mcp/tasks/schema.js';

export const MIGRATIONS: readonly Migration[] = [
  usersMigration,
  piiMigration,
  tokensMigration,
  auditMigration,
  UPSTREAM_MIGRATION,
  piiBatchesMigration,
  UPSTREAM_IDENTITIES_MIGRATION,
  auditCallersMigration,
  agentMigration,
  webMigration,
  adminMigration,
  anonymousSessionsMigration,
  apiHistoryMigration,
  githubIdentityMigration,
  renderedAnswersMigration,
  tokensActiveIndexMigration,
  storeUsageMigration,
  replicasMigration,
  rateBucketsMigration,
  liveAttachmentsMigration,
  turnsReplicaMigration,
  oauthMigration,
  tasksMigration,
  auditEgressMigration,
  rateBucketsUnloggedMigration,
  workspaceHomesMigration,
  workspaceDeletionsMigration,
];

/** The schema version a step brings the store to. */
export function versionOf(step: Migration): number {
  const i = MIGRATIONS.indexOf(step);
  if (i < 0) throw new Error(`not a registered migration: ${step.description}`);
  return i + 1;
}
