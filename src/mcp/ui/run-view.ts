/**
 * A UI resource for `execute_code` (MCP Apps, the `io.modelcontextprotocol/ui`
 * extension): hosts that render UI resources show a run inline with this view: its
 * output, the images it wrote (a plot) and the CSV files it wrote as tables. The tool
 * names the view in its `_meta.ui.resourceUri`; hosts that do not render UI ignore it
 * and show the text as before.
 *
 * The view is one self-contained HTML page (run-view.html) with the MCP Apps SDK's
 * bundled App inlined: the host renders it in a sandboxed iframe without network, and
 * hands it the call's result. The files are read through the host as the workspace's
 * `resources/read` (the same PII boundary as every result: a table shows tokens where
 * the model sees tokens).
 */
import fs from 'node:fs';
import { createRequire } from 'node:module';
import type { McpServer } from '@modelcontextprotocol/server';
import { EXTENSION_ID as UI_EXTENSION, registerAppResource, RESOURCE_MIME_TYPE } from '@modelcontextprotocol/ext-apps/server';

export const RUN_VIEW_URI = 'ui://sandgate/run.html';

let html: string | undefined;

/**
 * The page: the template with the SDK's App bundle inlined. Its `export{a as B,…}` list
 * becomes an object the view's code reads (`__extApps.App`), as an inline module script
 * cannot import from itself.
 */
export function runViewHtml(): string {
  if (html) return html;
  const require = createRequire(import.meta.url);
  const bundle = fs.readFileSync(require.resolve('@modelcontextprotocol/ext-apps/app-with-deps'), 'utf8');
  const exported = /export\s*\{([^}]*)\}\s*;?\s*$/.exec(bundle);
  if (!exported) throw new Error('the MCP Apps bundle no longer ends with one export list');
  const names = exported[1]!
    .split(',')
    .map((s) => s.trim())
    .filter(Boolean)
    .map((s) => {
      const [local, as] = s.split(/\s+as\s+/);
      return `${JSON.stringify(as ?? local)}: ${local}`;
    });
  const app = `${bundle.slice(0, exported.index)}\nconst __extApps = { ${names.join(', ')} };`;
  if (/<\/script/i.test(app)) throw new Error('the MCP Apps bundle cannot be inlined in a script element');
  const template = fs.readFileSync(new URL('./run-view.html', import.meta.url), 'utf8');
  html = template.replace('/*EXT_APPS*/', () => app);
  return html;
}

/** The view as a resource (`ui://`), the same for every user; the extension in the server's capabilities. */
export function registerRunView(server: McpServer): void {
  server.server.registerCapabilities({ extensions: { [UI_EXTENSION]: {} } });
  registerAppResource(server, 'run-view', RUN_VIEW_URI, { title: 'sandgate run', description: 'Shows a run of execute_code: its output, the images it drew and the CSV files it wrote.' }, async () => ({
    contents: [{ uri: RUN_VIEW_URI, mimeType: RESOURCE_MIME_TYPE, text: runViewHtml(), _meta: { ui: { prefersBorder: true } } }],
  }));
}
