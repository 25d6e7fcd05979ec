// fs.globSync arrived in Node 22; the conformance suite imports it. On Node 20 it is
// glob's own sync (the `glob` package), with everything else of fs as it is.
import fs from 'node:fs';
import { createRequire } from 'node:module';

const glob = createRequire(import.meta.url)('glob');
export * from 'node:fs';
export default fs;
export const globSync = fs.globSync ?? ((pattern, options) => glob.sync(pattern, options));
