// Loaded into Node-based stdio upstream servers (NODE_OPTIONS=--require) whose network
// goes through the gateway's egress proxy: Node's own fetch does not read HTTP_PROXY and
// HTTPS_PROXY, undici's EnvHttpProxyAgent does. A server that still ignores the proxy has
// no network at all: its namespace has nothing else.
'use strict';
try {
  const { setGlobalDispatcher, EnvHttpProxyAgent } = require('undici');
  setGlobalDispatcher(new EnvHttpProxyAgent());
} catch (e) {
  process.stderr.write(`sandgate: could not route fetch through the egress proxy: ${e && e.message}\n`);
}
