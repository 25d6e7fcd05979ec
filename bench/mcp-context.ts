/**
 * Context tokens a client loads from sandgate at connect time: the tool definitions
 * (tools/list, as a client hands them to a model) and the server instructions (with
 * the skills index), counted with the o200k_base tokenizer (gpt-tokenizer).
 *
 *   node --import tsx bench/mcp-context.ts [--json]
 *
 * Measured through the SDK's client over real HTTP against the real gateway, so what is
 * counted is exactly what a client receives.
 */
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { countTokens } from 'gpt-tokenizer/encoding/o200k_base';
import { startGateway } from '../test/support/mcp.js';

export interface ContextFigures {
  tools: { name: string; tokens: number }[];
  toolsTokens: number;
  instructionsTokens: number;
  resourceTemplatesTokens: number;
  total: number;
}

/** Counts what one client of `mcpUrl` loads. A tool counts as {name, description, inputSchema} JSON. */
export async function measureContext(mcpUrl: string, token: string): Promise<ContextFigures> {
  const client = new Client({ name: 'bench-context', version: '1' });
  await client.connect(new StreamableHTTPClientTransport(new URL(mcpUrl), { requestInit: { headers: { Authorization: `Bearer ${token}` } } }));
  try {
    const { tools } = await client.listTools();
    const perTool = tools.map((t) => ({ name: t.name, tokens: countTokens(JSON.stringify({ name: t.name, description: t.description, inputSchema: t.inputSchema })) }));
    const { resourceTemplates } = await client.listResourceTemplates();
    const toolsTokens = countTokens(JSON.stringify(tools.map((t) => ({ name: t.name, description: t.description, inputSchema: t.inputSchema }))));
    const instructionsTokens = countTokens(client.getInstructions() ?? '');
    const resourceTemplatesTokens = countTokens(JSON.stringify(resourceTemplates));
    return { tools: perTool, toolsTokens, instructionsTokens, resourceTemplatesTokens, total: toolsTokens + instructionsTokens };
  } finally {
    await client.close();
  }
}

async function main(): Promise<void> {
  const gw = await startGateway({ noStart: true });
  try {
    const figures = await measureContext(gw.mcpUrl, await gw.tokenFor('bench', 'context'));
    if (process.argv.includes('--json')) {
      console.log(JSON.stringify(figures, null, 2));
      return;
    }
    console.log('\nsandgate context at connect (o200k_base tokens)\n');
    for (const t of figures.tools) console.log(`  ${t.name.padEnd(14)} ${String(t.tokens).padStart(5)}`);
    console.log(`  ${'tools/list'.padEnd(14)} ${String(figures.toolsTokens).padStart(5)}  (${figures.tools.length} tools)`);
    console.log(`  ${'instructions'.padEnd(14)} ${String(figures.instructionsTokens).padStart(5)}  (usage + skills index)`);
    console.log(`  ${'total'.padEnd(14)} ${String(figures.total).padStart(5)}`);
    console.log(`\n  (resource templates, if a client loads them: ${figures.resourceTemplatesTokens} more)`);
  } finally {
    await gw.close();
  }
}

if (import.meta.url === `file://${process.argv[1]}`) await main();
