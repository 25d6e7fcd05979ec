/**
 * Schema of MCP tasks (the `io.modelcontextprotocol/tasks` extension): one row per
 * `execute_code` answered with a task handle instead of its result. The row is the
 * task's durable state, so any gateway (after a restart, or another replica) answers
 * `tasks/get` from it; the run itself goes on in the user's sandbox, kept by the runner
 * (sandbox/runner/PROTOCOL.md, Kept executions) until a gateway stores its result here.
 */
import type { Migration } from '../../store/migrations.js';

declare module '../../store/tables.js' {
  interface Tables {
    mcp_tasks: McpTasksTable;
  }
}

export type TaskStatus = 'working' | 'completed' | 'failed' | 'cancelled';

export interface McpTasksTable {
  /** The handle the client holds: 128 random bits. */
  id: string;
  user_id: number;
  /** How the caller came (JSON of its Via): only the same token (or session) sees the task. */
  via: string;
  /** The runner's id of the kept run (never the handle: code in the sandbox sees its own). */
  exec_id: string;
  language: string;
  timeout_sec: number;
  /** MCP-Protocol-Version of the call (whether the result may carry resource links). */
  protocol_version: string | null;
  status: TaskStatus;
  status_message: string | null;
  /** The CallToolResult as the caller's model sees it (JSON), once completed. */
  result: string | null;
  /** The JSON-RPC error, once failed. */
  error: string | null;
  /** The client asked to cancel (any gateway); the one following the run kills it. */
  cancel_requested: number;
  created_at: number;
  updated_at: number;
  expires_at: number;
  /** The gateway following the run, and when it last said so. */
  watcher: string | null;
  watched_at: number | null;
}

export const tasksMigration: Migration = {
  description: 'MCP tasks: long execute_code runs answered with a handle, their state and result',
  sqlite: `
      CREATE TABLE mcp_tasks (
        id TEXT PRIMARY KEY,
        user_id INTEGER NOT NULL REFERENCES users(id) ON DELETE CASCADE,
        via TEXT NOT NULL,
        exec_id TEXT NOT NULL,
        language TEXT NOT NULL,
        timeout_sec INTEGER NOT NULL,
        protocol_version TEXT,
        status TEXT NOT NULL CHECK (status IN ('working', 'completed', 'failed', 'cancelled')),
        status_message TEXT,
        result TEXT,
        error TEXT,
        cancel_requested INTEGER NOT NULL DEFAULT 0,
        created_at INTEGER NOT NULL,
        updated_at INTEGER NOT NULL,
        expires_at INTEGER NOT NULL,
        watcher TEXT,
        watched_at INTEGER
      );
      CREATE INDEX mcp_tasks_user ON mcp_tasks(user_id, created_at);
      CREATE INDEX mcp_tasks_working ON mcp_tasks(status) WHERE status = 'working';
      CREATE INDEX mcp_tasks_expiry ON mcp_tasks(expires_at);
    `,
  postgres: `
      CREATE TABLE mcp_tasks (
        id TEXT PRIMARY KEY,
        user_id BIGINT NOT NULL REFERENCES users(id) ON DELETE CASCADE,
        via TEXT NOT NULL,
        exec_id TEXT NOT NULL,
        language TEXT NOT NULL,
        timeout_sec INTEGER NOT NULL,
        protocol_version TEXT,
        status TEXT NOT NULL CHECK (status IN ('working', 'completed', 'failed', 'cancelled')),
        status_message TEXT,
        result TEXT,
        error TEXT,
        cancel_requested INTEGER NOT NULL DEFAULT 0,
        created_at BIGINT NOT NULL,
        updated_at BIGINT NOT NULL,
        expires_at BIGINT NOT NULL,
        watcher TEXT,
        watched_at BIGINT
      );
      CREATE INDEX mcp_tasks_user ON mcp_tasks(user_id, created_at);
      CREATE INDEX mcp_tasks_working ON mcp_tasks(status) WHERE status = 'working';
      CREATE INDEX mcp_tasks_expiry ON mcp_tasks(expires_at);
    `,
};
