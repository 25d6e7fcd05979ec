/**
 * Workspace paths in the web app's addresses and pages.
 *
 * File names are bytes, and code in a sandbox may write names that are not UTF-8. In the
 * gateway such a name is a string with each stray byte as its lone surrogate (the
 * convention of the workspace helper and of src/mcp/uri-path.ts). In an address it is
 * percent-encoded as its bytes (`/files?path=bad%FF.txt`, as MCP's resource URIs name it),
 * so that every link reaches the very file; on a page it is shown with U+FFFD for each
 * stray byte. The app's pages name a file or folder only in addresses, never in a form
 * field: a form field is text, which cannot hold such a name.
 */
import type { Request } from 'express';
import { decodePathSegment, encodePathSegment } from '../../mcp/uri-path.js';
import { WorkspaceError } from '../../sandboxes/workspace.js';

/** A workspace path as a query value: each segment percent-encoded, a stray byte as itself. Never throws. */
export function pathQuery(rel: string): string {
  return rel.split('/').map(encodePathSegment).join('/');
}

/** A path as text to show: each lone surrogate (a stray byte of a name) as U+FFFD. */
export function shownPath(rel: string): string {
  return rel.replace(/[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/g, '\ufffd');
}

/**
 * The query parameter `name` of the request's address as a workspace path (what
 * `pathQuery` wrote): percent-escapes read as the bytes of names, `+` as a space;
 * undefined when the address has none. Read from the raw address, as the query parser
 * would turn a stray byte into U+FFFD. A `%` without two hex digits is the user's error.
 */
export function pathParam(req: Request, name: string): string | undefined {
  const url = req.originalUrl;
  const start = url.indexOf('?');
  if (start < 0) return undefined;
  for (const pair of url.slice(start + 1).split('&')) {
    const eq = pair.indexOf('=');
    if ((eq < 0 ? pair : pair.slice(0, eq)) !== name) continue;
    const value = eq < 0 ? '' : pair.slice(eq + 1);
    try {
      return decodePathSegment(value.replace(/\+/g, ' '));
    } catch {
      throw new WorkspaceError('EINVAL', `the ${name} in the address is not percent-encoded correctly`);
    }
  }
  return undefined;
}
