// Module hooks for the conformance suite on Node 20: its `fs` is ./fs-glob.mjs.
export async function resolve(specifier, context, next) {
  if ((specifier === 'fs' || specifier === 'node:fs') && context.parentURL?.includes('/@modelcontextprotocol/conformance/')) {
    return { url: new URL('./fs-glob.mjs', import.meta.url).href, shortCircuit: true };
  }
  return next(specifier, context);
}
