/**
 * search_tools: finds upstream MCP tools the caller may use, at the level of detail the
 * model asks for, so it loads only the definitions it needs instead of all of them.
 */
import type { McpServer } from '@modelcontextprotocol/server';
import { z } from 'zod';
import { jsonSchemaOnce } from '../schema-cache.js';
import { DEFAULT_SEARCH_LIMIT, MAX_SEARCH_LIMIT, type CatalogEntry, type CatalogDetail } from '../catalog.js';
import { errorResult, forCall, fromModel, textResult, type ToolContext } from '../context.js';

export const NO_UPSTREAM_SERVERS =
  'No upstream MCP servers are configured on this gateway, so there are no tools to search. You can still run code with execute_code; ask your sandgate admin to add the servers you need.';
export const NO_UPSTREAM_SERVERS_FOR_YOU =
  'None of the upstream MCP servers on this gateway is open to you, so there are no tools to search. You can still run code with execute_code; ask your sandgate admin for access to the servers you need.';

export function formatEntries(entries: CatalogEntry[], detail: CatalogDetail): string {
  return entries
    .map((e) => {
      const head = `${e.server}.${e.tool}  ${e.path}`;
      if (detail === 'names') return head;
      const desc = e.description ? `\n  ${e.description.replace(/\s*\n\s*/g, ' ')}` : '';
      if (detail === 'descriptions') return `${head}${desc}`;
      return `${head}${desc}${e.inputSchema ? `\n  input: ${JSON.stringify(e.inputSchema)}` : ''}`;
    })
    .join('\n');
}

export const SEARCH_TOOLS_INPUT = jsonSchemaOnce(
  z.object({
    query: z.string().max(500).describe('What you want to do, or a server or tool name; empty lists everything'),
    detail: z.enum(['names', 'descriptions', 'schemas']).optional().describe('How much to return per tool (default descriptions)'),
    limit: z.number().int().min(1).max(MAX_SEARCH_LIMIT).optional().describe(`Most tools to return (default ${DEFAULT_SEARCH_LIMIT})`),
  }),
);

export function registerSearchTools(server: McpServer, ctx: ToolContext): void {
  server.registerTool(
    'search_tools',
    {
      title: 'Search upstream tools',
      description:
        'Search the tools of the upstream MCP servers you may use (e.g. "github issues", "send email"). ' +
        'Each hit names the typed wrapper under /tools/servers/ that you import in execute_code to call it. ' +
        'detail: "names" (cheapest), "descriptions" (default) or "schemas" (full input schemas, for the tools you will call).',
      inputSchema: SEARCH_TOOLS_INPUT,
      annotations: { readOnlyHint: true, openWorldHint: false },
    },
    async ({ query, detail = 'descriptions', limit = DEFAULT_SEARCH_LIMIT }) => {
      const call = forCall(ctx);
      try {
        const servers = ctx.catalog ? await ctx.catalog.servers(ctx.owner) : { configured: 0, open: 0 };
        if (!ctx.catalog || servers.configured === 0) return textResult(call, NO_UPSTREAM_SERVERS);
        if (servers.open === 0) return textResult(call, NO_UPSTREAM_SERVERS_FOR_YOU);
        const wanted = await fromModel(call, query);
        const entries = await ctx.catalog.search(ctx.owner, wanted, detail, limit);
        if (!entries.length) return textResult(call, `No upstream tools match "${wanted}". Try other words, or an empty query to list them all.`);
        // Upstream descriptions and schemas are text from other servers: they pass the boundary too.
        return textResult(call, formatEntries(entries.slice(0, limit), detail));
      } catch (e) {
        return errorResult(call, 'search_tools', e);
      }
    },
  );
}
