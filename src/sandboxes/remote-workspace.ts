/**
 * A workspace on another sandbox host, reached through a gateway there. With gateways on
 * several hosts, each keeping workspaces on its own disk, a user's files are on the host
 * of their last sandbox (src/replicas/leases.ts `homeOf`); a file operation that reaches
 * a gateway elsewhere (the files page, the MCP file tools) is one request to a replica
 * on that host, which hands it to the workspace's confined helper there.
 *
 * The request is the helper's own (workspace-helper.ts: a header and a payload), sent
 * with `askReplica` (signed for that replica, sealed both ways). The receiving end
 * (`parseWorkspaceHop`, then SandboxExecution.workspaceRequestHere) takes only the
 * helper's operations and serves them only when the user's files are in its own store;
 * the helper still refuses every path outside the workspace, as it does for local calls.
 */
import type { HopSigner } from '../replicas/hop-auth.js';
import { HopRefused, askReplica, type HopTarget } from './remote.js';
import { HelperError, type HelperReply, type HelperRequests } from './workspace-helper.js';
import { MAX_READ_BYTES, WorkspaceError } from './workspace.js';
import type { Logger } from '../logger.js';
import type { SandboxOwner } from './types.js';

export const HOP_WORKSPACE_PATH = '/internal/v2/workspace';

/** The helper operations a replica may ask of another's workspace store: Workspace's own. */
const OPS = new Set(['stat', 'read', 'write', 'mkdirs', 'remove', 'rename', 'list']);
/** Operations that change the workspace: the holder's next run scans it afresh. */
export const CHANGING_OPS = new Set(['write', 'mkdirs', 'remove', 'rename']);
/** Largest payload either way: a read's limit (writes come in smaller steps). */
export const MAX_WORKSPACE_HOP_BYTES = MAX_READ_BYTES;
/** The sealed request's largest size on the wire: the payload in base64, the header, the seal. */
export const MAX_WORKSPACE_HOP_BODY = Math.ceil((MAX_WORKSPACE_HOP_BYTES * 4) / 3) + 256 * 1024;

/** A file operation as one replica asks it of another. */
export interface WorkspaceHop {
  owner: SandboxOwner;
  header: Record<string, string | number | boolean>;
  data?: Buffer;
}

/** The fields of a helper request (Workspace's), each of one type; any other is refused. */
const FIELDS: Record<string, 'string' | 'number' | 'boolean'> = {
  op: 'string',
  path: 'string',
  from: 'string',
  to: 'string',
  offset: 'number',
  length: 'number',
  limit: 'number',
  depth: 'number',
  append: 'boolean',
  recursive: 'boolean',
};
/** Longer than any path the helper takes (4096 bytes), in characters. */
const MAX_PATH_CHARS = 8192;

const isObject = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);
const BASE64 = /^[A-Za-z0-9+/]*={0,2}$/;

/** The file operation a hop asks for, checked; undefined when the body is not one. */
export function parseWorkspaceHop(v: unknown): WorkspaceHop | undefined {
  if (!isObject(v) || !isObject(v.owner) || !isObject(v.header)) return undefined;
  const { userId, name } = v.owner;
  if (typeof userId !== 'number' || !Number.isSafeInteger(userId) || userId <= 0 || typeof name !== 'string' || name.length > 200) return undefined;
  if (typeof v.header.op !== 'string' || !OPS.has(v.header.op)) return undefined;
  const header: WorkspaceHop['header'] = {};
  for (const [k, x] of Object.entries(v.header)) {
    // The payload's length is the helper client's to say, from the payload itself.
    if (k === 'bytes') continue;
    const kind = FIELDS[k];
    if (!kind || typeof x !== kind) return undefined;
    if (typeof x === 'string' && x.length > MAX_PATH_CHARS) return undefined;
    if (typeof x === 'number' && !(Number.isSafeInteger(x) && x >= 0)) return undefined;
    header[k] = x as string | number | boolean;
  }
  // A read asks for no more than the hop carries.
  if (typeof header.length === 'number' && header.length > MAX_WORKSPACE_HOP_BYTES) header.length = MAX_WORKSPACE_HOP_BYTES;
  let data: Buffer | undefined;
  if (v.data !== undefined) {
    if (typeof v.data !== 'string' || !BASE64.test(v.data)) return undefined;
    data = Buffer.from(v.data, 'base64');
    if (data.length > MAX_WORKSPACE_HOP_BYTES) return undefined;
  }
  return { owner: { userId, name }, header, ...(data && { data }) };
}

export interface RemoteWorkspaceOptions {
  signer: HopSigner;
  selfId: string;
  /** Where the reason of a hop that failed is told (the user reads "try again"). */
  log: Logger;
}

/**
 * The helper requests of `owner`'s workspace, sent to `target` (a replica on the store
 * holding their files). A replica that cannot be reached, or no longer serves that store,
 * is a HelperError ("try again"): the Workspace shows it as the workspace unavailable.
 */
export function remoteWorkspace(target: HopTarget, owner: SandboxOwner, o: RemoteWorkspaceOptions): HelperRequests {
  return {
    async request(header, data) {
      if (data && data.length > MAX_WORKSPACE_HOP_BYTES) throw new WorkspaceError('ETOOBIG', `at most ${MAX_WORKSPACE_HOP_BYTES} bytes can be written at once to a workspace on another sandbox host`);
      let answer: unknown;
      try {
        answer = await askReplica(
          target,
          HOP_WORKSPACE_PATH,
          { owner, header, ...(data && { data: data.toString('base64') }) },
          // The helper's own limit for one request is 30 s; the answer, a read's payload in base64, sealed and in base64 again.
          { signer: o.signer, selfId: o.selfId, timeoutMs: 35_000, maxBytes: Math.ceil(MAX_WORKSPACE_HOP_BODY * 1.4) },
        );
      } catch (e) {
        if (e instanceof HopRefused) {
          o.log.warn({ user: owner.name, to: target.id, op: header.op, err: e.message }, 'a file operation sent to the gateway on the host of a user\'s files failed');
          throw new HelperError('the gateway on the host of these files did not answer: try again in a few seconds');
        }
        throw e;
      }
      return checkedAnswer(answer);
    },
  };
}

/** The other replica's answer as the helper's reply, or its refusal as a HelperError. */
function checkedAnswer(v: unknown): { reply: HelperReply; data?: Buffer } {
  if (isObject(v) && isObject(v.error) && typeof v.error.message === 'string') throw new HelperError(v.error.message.slice(0, 500));
  if (!isObject(v) || !isObject(v.reply) || typeof v.reply.ok !== 'boolean') throw new HelperError('the gateway on the host of these files sent an answer that is not one');
  if (v.data !== undefined && (typeof v.data !== 'string' || !BASE64.test(v.data))) throw new HelperError('the gateway on the host of these files sent data that is not base64');
  const data = typeof v.data === 'string' ? Buffer.from(v.data, 'base64') : undefined;
  if (data && data.length > MAX_WORKSPACE_HOP_BYTES) throw new HelperError('the gateway on the host of these files sent more than a read may hold');
  const reply = { ...v.reply } as HelperReply;
  if (typeof reply.message === 'string') reply.message = reply.message.slice(0, 2000);
  return { reply, ...(data && { data }) };
}
