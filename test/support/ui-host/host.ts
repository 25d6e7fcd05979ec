/**
 * A minimal MCP Apps host for Chromium, bundled by test/mcp-ui.test.ts: it renders a UI
 * resource in a sandboxed iframe (scripts only, an opaque origin, as hosts do) and
 * talks to it with the MCP Apps SDK's own host side (AppBridge). Resource reads the view
 * asks for go to `window.readResource`, which the test binds to a real MCP client of
 * the gateway.
 */
import { AppBridge, PostMessageTransport } from '@modelcontextprotocol/ext-apps/app-bridge';

declare global {
  interface Window {
    readResource(params: { uri: string }): Promise<unknown>;
    showRun(html: string, input: Record<string, unknown>, result: Record<string, unknown>): Promise<void>;
  }
}

window.showRun = async (html, input, result) => {
  const iframe = document.createElement('iframe');
  iframe.setAttribute('sandbox', 'allow-scripts');
  iframe.style.cssText = 'width: 800px; height: 900px; border: 0';
  iframe.srcdoc = html;
  document.body.append(iframe);
  await new Promise((r) => iframe.addEventListener('load', r, { once: true }));
  const bridge = new AppBridge(null, { name: 'sandgate-test-host', version: '1.0.0' }, { serverResources: {} });
  bridge.onreadresource = async (params) => (await window.readResource(params)) as Awaited<ReturnType<NonNullable<typeof bridge.onreadresource>>>;
  const initialized = new Promise<void>((r) => (bridge.oninitialized = () => r()));
  await bridge.connect(new PostMessageTransport(iframe.contentWindow!, iframe.contentWindow!));
  await initialized;
  await bridge.sendToolInput({ arguments: input });
  await bridge.sendToolResult(result as Parameters<typeof bridge.sendToolResult>[0]);
};
