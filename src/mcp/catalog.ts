/**
 * What `search_tools` searches: the upstream MCP tools a user may call from code.
 * The upstream hub (src/upstream/) implements it; without one, the gateway simply has
 * no upstream servers configured.
 */
import type { SandboxOwner } from '../sandboxes/types.js';

export type CatalogDetail = 'names' | 'descriptions' | 'schemas';

/** Tools one search returns when no limit is given, and at most. */
export const DEFAULT_SEARCH_LIMIT = 10;
export const MAX_SEARCH_LIMIT = 50;

export interface CatalogEntry {
  server: string;
  tool: string;
  description?: string;
  inputSchema?: object;
  /** Where the typed wrapper lives in the sandbox, e.g. /tools/servers/<server>/<tool>.ts */
  path: string;
}

export interface ToolCatalog {
  /** How many upstream servers the gateway has, and how many of them `owner` may use. */
  servers(owner: SandboxOwner): Promise<{ configured: number; open: number }>;
  /** Only tools `owner` may use; `detail` decides which optional fields are filled. */
  search(owner: SandboxOwner, query: string, detail: CatalogDetail, limit?: number): Promise<CatalogEntry[]>;
}
