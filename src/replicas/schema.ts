/**
 * The gateway tier's shared state: which gateway processes (replicas) are alive, and
 * which one holds each user's sandbox.
 *
 * `gateway_replicas` has a row per running replica: where other replicas reach it (its
 * internal URL), which sandbox host it runs its sandboxes on, and its heartbeat. A
 * replica whose heartbeat is older than the lease time is dead to every other one.
 *
 * `sandbox_leases` has a row per user whose sandbox a replica holds or once held. A
 * lease lasts as long as its holder's heartbeat does (one write a beat renews all of a
 * replica's leases); a released one keeps its row with no holder. `epoch` grows by one
 * each time the lease changes hands and never goes back: the fencing token that tells
 * a holder it lost the lease (src/replicas/leases.ts).
 */
import type { Migration } from '../store/migrations.js';

declare module '../store/tables.js' {
  interface Tables {
    gateway_replicas: GatewayReplicasTable;
    sandbox_leases: SandboxLeasesTable;
  }
}

export interface GatewayReplicasTable {
  /** Chosen by the replica at start, new at every start. */
  id: string;
  /** Where other replicas reach this one's internal endpoint; null when it takes no hops. */
  internal_url: string | null;
  /** The sandbox host (a dockerd) this replica runs sandboxes on. */
  sandbox_host: string;
  started_at: number;
  /** Epoch ms of the last heartbeat the replica wrote. */
  heartbeat_at: number;
  /** Set when the replica began to stop: it takes no new sandbox. */
  draining_at: number | null;
  /** The workspace store its sandboxes use (workspaceHomesMigration); null from an earlier release. */
  workspace_store: string | null;
}

export interface SandboxLeasesTable {
  user_id: number;
  /** Null once released: the row stays, so the epoch never goes back. */
  replica_id: string | null;
  /** Grows by one at every change of holder: a holder acts only while its epoch is the row's. */
  epoch: number;
  acquired_at: number;
  /** The workspace store of the user's last sandbox: where their files are (workspaceHomesMigration). */
  workspace_store: string | null;
}

export const replicasMigration: Migration = {
  description: 'gateway replicas and the leases on users’ sandboxes',
  sqlite: `
      CREATE TABLE gateway_replicas (
        id TEXT PRIMARY KEY,
        internal_url TEXT,
        sandbox_host TEXT NOT NULL,
        started_at INTEGER NOT NULL,
        heartbeat_at INTEGER NOT NULL,
        draining_at INTEGER
      );
      CREATE TABLE sandbox_leases (
        -- WITHOUT ROWID: a user's id, never one SQLite numbers (INTEGER PRIMARY KEY would be the rowid).
        user_id INTEGER NOT NULL PRIMARY KEY REFERENCES users(id) ON DELETE CASCADE,
        replica_id TEXT,
        epoch INTEGER NOT NULL,
        acquired_at INTEGER NOT NULL
      ) WITHOUT ROWID;
      CREATE INDEX sandbox_leases_replica ON sandbox_leases(replica_id);
    `,
  postgres: `
      CREATE TABLE gateway_replicas (
        id TEXT PRIMARY KEY,
        internal_url TEXT,
        sandbox_host TEXT NOT NULL,
        started_at BIGINT NOT NULL,
        heartbeat_at BIGINT NOT NULL,
        draining_at BIGINT
      );
      CREATE TABLE sandbox_leases (
        user_id BIGINT PRIMARY KEY REFERENCES users(id) ON DELETE CASCADE,
        replica_id TEXT,
        epoch BIGINT NOT NULL,
        acquired_at BIGINT NOT NULL
      );
      CREATE INDEX sandbox_leases_replica ON sandbox_leases(replica_id);
    `,
};

declare module '../store/tables.js' {
  interface Tables {
    workspace_stores: WorkspaceStoresTable;
  }
}

/** A workspace store (src/sandboxes/types.ts `storeId`): when a replica on it last beat. */
export interface WorkspaceStoresTable {
  id: string;
  seen_at: number;
}

/**
 * Where each user's files are. A replica says which workspace store its sandboxes use
 * (`gateway_replicas.workspace_store`; null from a replica of an earlier release), a
 * lease keeps the store of the user's last sandbox (`sandbox_leases.workspace_store`,
 * null until one is taken by this release), and `workspace_stores` when a replica on each
 * store last beat, so that a store whose gateways are all away for a restart is told from
 * one whose host is lost.
 */
export const workspaceHomesMigration: Migration = {
  description: 'replicas: the workspace store of each replica and of each user’s last sandbox',
  sqlite: `
      ALTER TABLE gateway_replicas ADD COLUMN workspace_store TEXT;
      ALTER TABLE sandbox_leases ADD COLUMN workspace_store TEXT;
      CREATE TABLE workspace_stores (
        id TEXT PRIMARY KEY,
        seen_at INTEGER NOT NULL
      );
    `,
  postgres: `
      ALTER TABLE gateway_replicas ADD COLUMN workspace_store TEXT;
      ALTER TABLE sandbox_leases ADD COLUMN workspace_store TEXT;
      CREATE TABLE workspace_stores (
        id TEXT PRIMARY KEY,
        seen_at BIGINT NOT NULL
      );
    `,
};

declare module '../store/tables.js' {
  interface Tables {
    workspace_copies: WorkspaceCopiesTable;
    workspace_deletions: WorkspaceDeletionsTable;
  }
}

/** A workspace store holding a copy of a workspace: where a sandbox of its user started, or a gateway found it at start. */
export interface WorkspaceCopiesTable {
  workspace_id: string;
  store: string;
}

/** A deleted user's workspace (its id never comes back): every store removes its copy. */
export interface WorkspaceDeletionsTable {
  workspace_id: string;
  deleted_at: number;
}

/**
 * Where workspaces have copies, and which are deleted users'. With gateways keeping
 * workspaces on their own hosts' disks, a user's files can be on more than one store: the
 * one of their last sandbox, and one they moved from when its host was lost. Deleting a
 * user asks a gateway of each store holding a copy to remove it; a store none of whose
 * gateways is running then removes its copies of the workspaces listed in
 * `workspace_deletions` when one of them starts, or looks again every few minutes. Those
 * rows stay (one per deleted user): a store can come back any time. The copies a store
 * had before are taken from the leases here, and from each store's folder at its next start.
 */
export const workspaceDeletionsMigration: Migration = {
  description: 'replicas: the stores holding each workspace, and the workspaces of deleted users',
  sqlite: `
      CREATE TABLE workspace_copies (
        workspace_id TEXT NOT NULL,
        store TEXT NOT NULL,
        PRIMARY KEY (workspace_id, store)
      ) WITHOUT ROWID;
      CREATE TABLE workspace_deletions (
        workspace_id TEXT PRIMARY KEY,
        deleted_at INTEGER NOT NULL
      ) WITHOUT ROWID;
      INSERT INTO workspace_copies (workspace_id, store)
        SELECT u.workspace_id, l.workspace_store FROM users u JOIN sandbox_leases l ON l.user_id = u.id
        WHERE u.workspace_id IS NOT NULL AND l.workspace_store IS NOT NULL;
    `,
  postgres: `
      CREATE TABLE workspace_copies (
        workspace_id TEXT NOT NULL,
        store TEXT NOT NULL,
        PRIMARY KEY (workspace_id, store)
      );
      CREATE TABLE workspace_deletions (
        workspace_id TEXT PRIMARY KEY,
        deleted_at BIGINT NOT NULL
      );
      INSERT INTO workspace_copies (workspace_id, store)
        SELECT u.workspace_id, l.workspace_store FROM users u JOIN sandbox_leases l ON l.user_id = u.id
        WHERE u.workspace_id IS NOT NULL AND l.workspace_store IS NOT NULL;
    `,
};
