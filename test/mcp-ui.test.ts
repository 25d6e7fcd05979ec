/**
 * UI resources (MCP Apps, `io.modelcontextprotocol/ui`) end to end: `execute_code`
 * names its view, the view is served as a `ui://` resource, and a host that renders UI
 * resources shows a run's plot and table inline. The host is the MCP Apps SDK's own
 * (AppBridge) in headless Chromium, the view the gateway's page as served, the run a real
 * one in the sandbox, and the view's file reads go through the host to a real MCP client
 * of the gateway.
 */
import path from 'node:path';
import { Client, StreamableHTTPClientTransport, type CallToolResult } from '@modelcontextprotocol/client';
import { EXTENSION_ID, RESOURCE_MIME_TYPE } from '@modelcontextprotocol/ext-apps/server';
import { build } from 'esbuild';
import { chromium, type Browser } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { RUN_VIEW_URI } from '../src/mcp/ui/run-view.js';
import { startGateway, type Gateway } from './support/mcp.js';

const CHROMIUM = process.env.SANDGATE_CHROMIUM ?? '/usr/bin/chromium';

let served: Gateway;
let client: Client;
let browser: Browser;

beforeAll(async () => {
  served = await startGateway();
  const token = await served.tokenFor('ui-dora');
  client = new Client({ name: 'ui-host', version: '1.0.0' }, { versionNegotiation: { mode: 'auto' }, capabilities: { extensions: { [EXTENSION_ID]: { mimeTypes: [RESOURCE_MIME_TYPE] } } } });
  await client.connect(new StreamableHTTPClientTransport(new URL(served.mcpUrl), { requestInit: { headers: { Authorization: `Bearer ${token}` } } }));
  browser = await chromium.launch({ executablePath: CHROMIUM, args: ['--no-sandbox'] });
});

afterAll(async () => {
  await browser?.close();
  await client?.close();
  await served?.close();
});

describe('the run view', () => {
  it('is named by execute_code and served as an MCP Apps resource', async () => {
    const discovered = await client.discover();
    expect(discovered.capabilities.extensions).toHaveProperty([EXTENSION_ID]);
    const exec = (await client.listTools()).tools.find((t) => t.name === 'execute_code')!;
    expect(exec._meta).toMatchObject({ ui: { resourceUri: RUN_VIEW_URI }, 'ui/resourceUri': RUN_VIEW_URI });
    const read = await client.readResource({ uri: RUN_VIEW_URI });
    expect(read.contents[0]).toMatchObject({ uri: RUN_VIEW_URI, mimeType: RESOURCE_MIME_TYPE });
    const html = (read.contents[0] as { text: string }).text;
    expect(html).toMatch(/^<!doctype html>/);
    // Self-contained: no script or style from anywhere else (the host's iframe has no network).
    expect(html).not.toMatch(/<script[^>]+\bsrc=/i);
    expect(html).not.toMatch(/<link[^>]+\bhref=/i);
  });

  it('shows a run’s plot and table inline in a host that renders it', async () => {
    const input = {
      language: 'python',
      code: [
        'import matplotlib.pyplot as plt, pandas as pd',
        'df = pd.DataFrame({"city": ["Lisbon", "Porto", "Faro"], "visitors": [512, 301, 97]})',
        'df.to_csv("visitors.csv", index=False)',
        'plt.bar(df.city, df.visitors)',
        'print("plotted", len(df), "cities")',
      ].join('\n'),
    };
    const result = (await client.callTool({ name: 'execute_code', arguments: input })) as CallToolResult;
    expect(result.isError).toBeFalsy();
    const links = result.content.filter((c) => c.type === 'resource_link');
    expect(links.map((l) => l.mimeType).sort()).toEqual(['image/png', 'text/csv']);

    const html = ((await client.readResource({ uri: RUN_VIEW_URI })).contents[0] as { text: string }).text;
    const bundled = await build({ entryPoints: [path.join(import.meta.dirname, 'support/ui-host/host.ts')], bundle: true, write: false, format: 'iife', platform: 'browser', logLevel: 'silent' });
    const page = await browser.newPage();
    const reads: string[] = [];
    await page.exposeFunction('readResource', async (params: { uri: string }) => (reads.push(params.uri), client.readResource(params)));
    await page.setContent('<!doctype html><html><body></body></html>');
    await page.addScriptTag({ content: bundled.outputFiles[0]!.text });
    await page.evaluate(([h, i, r]) => window.showRun(h, i, r), [html, input, result] as const);

    const view = page.frameLocator('iframe');
    await expect.poll(() => view.locator('pre').first().textContent(), { timeout: 15_000 }).toMatch(/^plotted 3 cities/);
    // The plot: the PNG the run wrote, read through the host, decoded by the browser.
    const img = view.locator('figure img');
    await expect.poll(() => img.evaluate((e: HTMLImageElement) => e.complete && e.naturalWidth), { timeout: 15_000 }).toBeGreaterThan(100);
    // The table: the CSV the run wrote, as rows.
    const cells = await view.locator('table tbody tr').evaluateAll((rows) => rows.map((r) => [...r.querySelectorAll('td')].map((td) => td.textContent)));
    expect(cells).toEqual([
      ['Lisbon', '512'],
      ['Porto', '301'],
      ['Faro', '97'],
    ]);
    expect(await view.locator('table th').allTextContents()).toEqual(['city', 'visitors']);
    expect(reads.sort()).toEqual(links.map((l) => l.uri).sort());
    await page.close();
  });
});
