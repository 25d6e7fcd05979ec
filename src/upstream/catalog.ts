/**
 * The ToolCatalog behind the MCP endpoint's `search_tools`: keyword search (MiniSearch:
 * prefix and fuzzy matching, BM25 ranking) over the names, titles and descriptions of
 * the upstream tools a user may call. Tool names are split into words (`create_issue`,
 * `createIssue` → create, issue) so "create issue" finds either.
 */
import MiniSearch from 'minisearch';
import { DEFAULT_SEARCH_LIMIT, MAX_SEARCH_LIMIT, type CatalogDetail, type CatalogEntry, type ToolCatalog } from '../mcp/catalog.js';
import type { SandboxOwner } from '../sandboxes/types.js';
import type { HubTool, UpstreamHub } from './hub.js';
import { words } from './names.js';
import { toolLocations } from './wrappers.js';

const STOP_WORDS = new Set('a an and are as at be by for from in into is it of on or that the this to with your you'.split(' '));

interface Doc {
  id: string;
  server: string;
  tool: string;
  title: string;
  description: string;
}

const tokenize = (text: string) => words(text).map((w) => w.toLowerCase());

function newIndex(): MiniSearch<Doc> {
  return new MiniSearch<Doc>({
    fields: ['tool', 'server', 'title', 'description'],
    tokenize,
    processTerm: (term) => (STOP_WORDS.has(term) ? null : term),
    searchOptions: {
      boost: { tool: 3, server: 2, title: 2 },
      prefix: true,
      fuzzy: 0.2,
      combineWith: 'OR',
    },
  });
}

export function createToolCatalog(hub: UpstreamHub): ToolCatalog {
  let cached: { key: string; index: MiniSearch<Doc>; byId: Map<string, HubTool> } | undefined;

  const indexFor = (tools: HubTool[]) => {
    const key = JSON.stringify(tools.map((t) => [t.server.name, t.tool.name, hub.toolsHash(t.server.name)]));
    if (cached?.key === key) return cached;
    const index = newIndex();
    const byId = new Map<string, HubTool>();
    for (const t of tools) {
      const id = `${t.server.name}\0${t.tool.name}`;
      byId.set(id, t);
      index.add({ id, server: t.server.name, tool: t.tool.name, title: t.tool.title ?? '', description: t.tool.description ?? '' });
    }
    cached = { key, index, byId };
    return cached;
  };

  return {
    async servers(owner: SandboxOwner) {
      return { configured: hub.servers().length, open: (await hub.serversFor(owner)).length };
    },
    async search(owner: SandboxOwner, query: string, detail: CatalogDetail, limit = DEFAULT_SEARCH_LIMIT): Promise<CatalogEntry[]> {
      const n = Math.max(1, Math.min(MAX_SEARCH_LIMIT, Math.floor(limit)));
      const { tools } = await hub.listTools(owner);
      let hits: HubTool[];
      if (!query.trim()) {
        hits = tools.slice(0, n);
      } else {
        const { index, byId } = indexFor(tools);
        hits = index
          .search(query)
          .slice(0, n)
          .map((r) => byId.get(String(r.id))!)
          .filter(Boolean);
      }
      const locations = new Map<string, ReturnType<typeof toolLocations>>();
      return hits.map(({ server, tool }) => {
        let locs = locations.get(server.name);
        if (!locs) {
          locs = toolLocations(server, tools.filter((t) => t.server === server).map((t) => t.tool));
          locations.set(server.name, locs);
        }
        const entry: CatalogEntry = { server: server.name, tool: tool.name, path: locs.get(tool.name)!.path };
        if (detail !== 'names' && tool.description) entry.description = tool.description;
        if (detail === 'schemas') entry.inputSchema = tool.inputSchema;
        return entry;
      });
    },
  };
}
