/** One HTTP request with full control of its headers, and its JSON-RPC messages read back whether they came as JSON or as an SSE stream. */
import http from 'node:http';

export interface RawResponse {
  status: number;
  headers: http.IncomingHttpHeaders;
  text: string;
  /** JSON-RPC messages of the body, whether it came as JSON or as an SSE stream. */
  messages: Record<string, unknown>[];
}

/**
 * One HTTP request with full control of the headers (fetch forbids setting Host), for
 * checks below what an MCP client library would send.
 */
export function rawRequest(url: string, opts: { method?: string; headers?: Record<string, string>; body?: unknown } = {}): Promise<RawResponse> {
  const u = new URL(url);
  const body = opts.body === undefined ? undefined : typeof opts.body === 'string' ? opts.body : JSON.stringify(opts.body);
  return new Promise((resolve, reject) => {
    const req = http.request(
      {
        host: u.hostname,
        port: u.port,
        path: u.pathname,
        method: opts.method ?? 'POST',
        headers: {
          'content-type': 'application/json',
          accept: 'application/json, text/event-stream',
          ...(body !== undefined ? { 'content-length': String(Buffer.byteLength(body)) } : {}),
          ...opts.headers,
        },
      },
      (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('end', () => {
          const text = Buffer.concat(chunks).toString('utf8');
          let messages: Record<string, unknown>[] = [];
          if (String(res.headers['content-type']).startsWith('text/event-stream')) {
            messages = text
              .split('\n')
              .filter((l) => l.startsWith('data: ') && l.length > 6)
              .map((l) => JSON.parse(l.slice(6)) as Record<string, unknown>);
          } else if (text) {
            try {
              const j = JSON.parse(text) as unknown;
              messages = (Array.isArray(j) ? j : [j]) as Record<string, unknown>[];
            } catch {
              /* not JSON */
            }
          }
          resolve({ status: res.statusCode ?? 0, headers: res.headers, text, messages });
        });
      },
    );
    req.on('error', reject);
    if (body !== undefined) req.write(body);
    req.end();
  });
}

let modernId = 0;

/**
 * One 2026-07-28 request as a client frames it over Streamable HTTP: the version, method
 * and name headers (`Mcp-Name` from the tool, or the task for `tasks/*`), and the `_meta`
 * envelope with `capabilities`; its first JSON-RPC message back, as it came.
 */
export async function modernRequest(
  mcpUrl: string,
  token: string,
  method: string,
  params: Record<string, unknown>,
  capabilities: Record<string, unknown> = {},
): Promise<{ result?: Record<string, unknown>; error?: { code: number; message: string; data?: unknown } }> {
  const name = method === 'tools/call' ? params.name : method.startsWith('tasks/') ? params.taskId : undefined;
  const r = await rawRequest(mcpUrl, {
    headers: { authorization: `Bearer ${token}`, 'mcp-protocol-version': '2026-07-28', 'mcp-method': method, ...(typeof name === 'string' ? { 'mcp-name': name } : {}) },
    body: {
      jsonrpc: '2.0',
      id: ++modernId,
      method,
      params: {
        ...params,
        _meta: {
          'io.modelcontextprotocol/protocolVersion': '2026-07-28',
          'io.modelcontextprotocol/clientInfo': { name: 'sandgate-test', version: '1' },
          'io.modelcontextprotocol/clientCapabilities': capabilities,
        },
      },
    },
  });
  const msg = r.messages[0] as { result?: Record<string, unknown>; error?: { code: number; message: string; data?: unknown } } | undefined;
  if (!msg) throw new Error(`HTTP ${r.status}: ${r.text.slice(0, 300)}`);
  return msg;
}
