/* global URL, Request, Headers */
/**
 * Preload (node --import) for the MCP Inspector CLI 0.15, which has no option for
 * request headers (later versions add --header but need Node 22): adds
 * `Authorization: Bearer $SANDGATE_TOKEN` to every fetch to $SANDGATE_MCP_URL's origin,
 * exactly what an MCP client's header setting does.
 */
const token = process.env.SANDGATE_TOKEN;
const origin = new URL(process.env.SANDGATE_MCP_URL).origin;
const realFetch = globalThis.fetch;

globalThis.fetch = (input, init = {}) => {
  const url = new URL(input instanceof Request ? input.url : String(input));
  if (url.origin !== origin) return realFetch(input, init);
  const headers = new Headers(init.headers ?? (input instanceof Request ? input.headers : undefined));
  headers.set('authorization', `Bearer ${token}`);
  return realFetch(input, { ...init, headers });
};
