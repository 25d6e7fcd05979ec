/**
 * The OAuth clients the gateway knows: those that registered themselves (RFC 7591
 * dynamic client registration) and those whose `client_id` is the https URL of a Client
 * ID Metadata Document, fetched here when first seen.
 *
 * Every client is public (`token_endpoint_auth_method: none`): an MCP client runs on a
 * user's machine or in a vendor's app and cannot keep a secret from its user, and PKCE
 * is what binds its code to it. A registration that asks for a secret gets none (RFC 7591
 * lets the server say which metadata it took).
 *
 * Registration is open to anyone who can reach the gateway, so it is bounded: a body of
 * at most REGISTRATION_MAX_BYTES, a few redirect URIs of bounded length, at most
 * `maxPending` registrations or documents never used for a grant at once (past it the
 * oldest goes), and those removed after an hour. A document is fetched over https on port
 * 443 only, from a public address checked at connect time (the gateway's own network and
 * other ports only when the operator allows it: SANDGATE_OAUTH_CLIENT_DOCUMENTS_PRIVATE),
 * four at a time within a budget, with a 5 s deadline, no redirects and at most 16 KiB;
 * it must name itself as its client_id.
 */
import crypto from 'node:crypto';
import dns from 'node:dns';
import net from 'node:net';
import tls from 'node:tls';
import { Agent, request } from 'undici';
import type { RateLimiter } from '../limits/rate-limit.js';
import type { Db } from '../store/store.js';
import { isPublicAddress } from '../addresses.js';

/** A client as the authorization endpoints need it. */
export interface OAuthClient {
  clientId: string;
  source: 'registered' | 'document';
  name: string;
  redirectUris: string[];
  /** Whether it registered the refresh_token grant (else it gets access tokens only). */
  refreshes: boolean;
  /** Where the client's name links to, if it gave one (shown on the consent page). */
  clientUri?: string;
}

/** Why a registration or a document was refused: RFC 7591's error and a sentence. */
export class ClientMetadataError extends Error {
  override name = 'ClientMetadataError';
  constructor(
    readonly error: 'invalid_client_metadata' | 'invalid_redirect_uri' | 'temporarily_unavailable',
    message: string,
    /** What the log gets besides the message (why a fetch failed): never shown to whoever asked. */
    readonly detail?: string,
  ) {
    super(message);
  }
}

export const REGISTRATION_MAX_BYTES = 16 * 1024;
const MAX_REDIRECT_URIS = 10;
const MAX_URI_LENGTH = 2000;
const MAX_NAME_LENGTH = 100;
/** A registration or fetched document never used for a grant is removed after this long. */
export const UNUSED_REGISTRATION_MS = 3_600_000;
/** Document fetches under way at once (each may take DOCUMENT_DEADLINE_MS); more wait for none, they are refused. */
const MAX_FETCHES = 4;
/** A fetched document is fetched again once older than this. */
const DOCUMENT_LIFETIME_MS = 3_600_000;
const DOCUMENT_MAX_BYTES = 16 * 1024;
const DOCUMENT_DEADLINE_MS = 5_000;

const LOOPBACK = new Set(['localhost', '127.0.0.1', '[::1]']);

/** A URL as a page may show it: at most 120 characters. */
const shown = (url: string) => (url.length > 120 ? `${url.slice(0, 119)}…` : url);

/**
 * A redirect URI a client may register: https anywhere, http only to loopback (a native
 * client's local listener), or a private-use scheme of a native app (`cursor://…`); no
 * fragment, no credentials. Undefined when allowed, else why not.
 */
export function redirectUriProblem(uri: string): string | undefined {
  if (uri.length > MAX_URI_LENGTH) return 'a redirect URI is longer than 2000 characters';
  let u: URL;
  try {
    u = new URL(uri);
  } catch {
    return `"${uri.slice(0, 100)}" is not a URL`;
  }
  if (u.hash) return 'a redirect URI may not have a fragment';
  if (u.username || u.password) return 'a redirect URI may not hold credentials';
  if (u.protocol === 'https:') return undefined;
  if (u.protocol === 'http:') return LOOPBACK.has(u.hostname) ? undefined : `http redirect URIs are allowed only to loopback (localhost, 127.0.0.1, [::1]); use https for ${u.hostname}`;
  // A private-use scheme of a native app (RFC 8252 §7.1): reverse domain or a plain app name, never a browser's own schemes.
  if (/^[a-z][a-z0-9+.-]*:$/.test(u.protocol) && !['javascript:', 'data:', 'file:', 'blob:', 'about:', 'vbscript:', 'ftp:', 'ws:', 'wss:'].includes(u.protocol)) return undefined;
  return `the redirect URI scheme ${u.protocol} is not allowed`;
}

/**
 * Whether a requested redirect URI is one the client registered: the same string, or
 * (RFC 8252 §7.3) a loopback URI that differs only by port.
 */
export function redirectUriMatches(requested: string, registered: readonly string[]): boolean {
  if (registered.includes(requested)) return true;
  let req: URL;
  try {
    req = new URL(requested);
  } catch {
    return false;
  }
  if (req.protocol !== 'http:' || !LOOPBACK.has(req.hostname)) return false;
  return registered.some((r) => {
    try {
      const reg = new URL(r);
      return reg.protocol === req.protocol && reg.hostname === req.hostname && reg.pathname === req.pathname && reg.search === req.search;
    } catch {
      return false;
    }
  });
}

const isObject = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);

/** The metadata kept of a registration or a document, checked; ClientMetadataError when it cannot be taken. */
export function checkedMetadata(v: unknown): { client_name?: string; client_uri?: string; redirect_uris: string[]; grant_types: string[]; response_types: string[]; token_endpoint_auth_method: 'none'; software_id?: string; software_version?: string } {
  if (!isObject(v)) throw new ClientMetadataError('invalid_client_metadata', 'the client metadata must be a JSON object');
  const uris = v.redirect_uris;
  if (!Array.isArray(uris) || uris.length === 0 || uris.length > MAX_REDIRECT_URIS || !uris.every((u) => typeof u === 'string')) {
    throw new ClientMetadataError('invalid_redirect_uri', `redirect_uris must be a list of 1 to ${MAX_REDIRECT_URIS} URIs`);
  }
  for (const u of uris as string[]) {
    const problem = redirectUriProblem(u);
    if (problem) throw new ClientMetadataError('invalid_redirect_uri', problem);
  }
  const grantTypes = v.grant_types ?? ['authorization_code'];
  if (!Array.isArray(grantTypes) || !grantTypes.every((g) => g === 'authorization_code' || g === 'refresh_token')) {
    throw new ClientMetadataError('invalid_client_metadata', 'grant_types may name only authorization_code and refresh_token');
  }
  const responseTypes = v.response_types ?? ['code'];
  if (!Array.isArray(responseTypes) || !responseTypes.every((r) => r === 'code')) throw new ClientMetadataError('invalid_client_metadata', 'response_types may name only code');
  const auth = v.token_endpoint_auth_method;
  if (auth !== undefined && typeof auth !== 'string') throw new ClientMetadataError('invalid_client_metadata', 'token_endpoint_auth_method must be a string');
  const text = (k: string, max: number): string | undefined => {
    const s = v[k];
    if (s === undefined) return undefined;
    if (typeof s !== 'string' || s.length > max) throw new ClientMetadataError('invalid_client_metadata', `${k} must be text of at most ${max} characters`);
    // Control characters have no place in a name shown on the consent page.
    return s.replace(/\p{Cc}|\p{Cf}/gu, '').trim() || undefined;
  };
  const clientUri = text('client_uri', MAX_URI_LENGTH);
  if (clientUri !== undefined && !/^https:\/\//.test(clientUri)) throw new ClientMetadataError('invalid_client_metadata', 'client_uri must be an https URL');
  return {
    ...(text('client_name', MAX_NAME_LENGTH) !== undefined && { client_name: text('client_name', MAX_NAME_LENGTH) }),
    ...(clientUri !== undefined && { client_uri: clientUri }),
    redirect_uris: uris as string[],
    grant_types: grantTypes as string[],
    response_types: ['code'],
    token_endpoint_auth_method: 'none',
    ...(text('software_id', 200) !== undefined && { software_id: text('software_id', 200) }),
    ...(text('software_version', 100) !== undefined && { software_version: text('software_version', 100) }),
  };
}

type Metadata = ReturnType<typeof checkedMetadata>;

function toClient(clientId: string, source: OAuthClient['source'], m: Metadata): OAuthClient {
  const host = (() => {
    try {
      return new URL(clientId).host;
    } catch {
      return undefined;
    }
  })();
  return {
    clientId,
    source,
    name: m.client_name ?? (source === 'document' && host ? host : 'an unnamed app'),
    redirectUris: m.redirect_uris,
    refreshes: m.grant_types.includes('refresh_token'),
    ...(m.client_uri !== undefined && { clientUri: m.client_uri }),
  };
}

/** Whether a client_id is the URL of a metadata document: https with a path, and nothing else in it. */
export function isDocumentClientId(clientId: string): boolean {
  if (!clientId.startsWith('https://') || clientId.length > MAX_URI_LENGTH) return false;
  try {
    const u = new URL(clientId);
    return u.pathname !== '/' && !u.hash && !u.username && !u.password;
  } catch {
    return false;
  }
}

export interface ClientStoreOptions {
  /** Registrations and fetched documents never used that are kept at once (SANDGATE_OAUTH_MAX_PENDING_CLIENTS): past it, the oldest goes. */
  maxPending: number;
  /** Document fetches this gateway may start (new or stale client ids): a budget, as anyone may name a URL. */
  fetches: RateLimiter;
  /** Fetch documents from loopback and private addresses too (SANDGATE_OAUTH_CLIENT_DOCUMENTS_PRIVATE). */
  documentsFromPrivate: boolean;
  /** CA certificates to trust for documents besides the system's (tests). */
  documentCa?: string;
}

export class ClientStore {
  private readonly agent: Agent;

  constructor(
    private readonly db: Db,
    private readonly opts: ClientStoreOptions,
  ) {
    const documentsFromPrivate = opts.documentsFromPrivate;
    // The address each connection goes to is the one checked, so a name cannot be made to
    // resolve elsewhere between the check and the use.
    const lookup: net.LookupFunction = (hostname, options, callback) => {
      dns.lookup(hostname, { all: true }, (err, addresses) => {
        if (err) return callback(err, '', 0);
        const blocked = addresses.find((a) => !isPublicAddress(a.address));
        if (!addresses.length || (blocked && !documentsFromPrivate)) {
          return callback(Object.assign(new Error(`${hostname} resolves to ${blocked?.address ?? 'nothing'}, a loopback, private or reserved address`), { code: 'EADDRNOTPUBLIC' }), '', 0);
        }
        const first = addresses[0]!;
        if ((options as { all?: boolean }).all) (callback as unknown as (e: null, a: dns.LookupAddress[]) => void)(null, [first]);
        else callback(null, first.address, first.family);
      });
    };
    this.agent = new Agent({ connect: { lookup, timeout: DOCUMENT_DEADLINE_MS, ...(opts.documentCa && { ca: [...tls.rootCertificates, opts.documentCa] }) }, connections: 4 });
  }

  async close(): Promise<void> {
    await this.agent.close();
  }

  private fetching = 0;

  /**
   * The client with this id: registered, or a document (fetched when unknown or old).
   * Undefined when there is none. `stale`: a document kept from before is good enough
   * however old (the token endpoint: a vendor's site being down must not end its users'
   * sessions; only the authorization request, which reads the redirect URIs, refetches).
   */
  async get(clientId: string, opts: { stale?: boolean; now?: number } = {}): Promise<OAuthClient | undefined> {
    const now = opts.now ?? Date.now();
    if (typeof clientId !== 'string' || clientId.length === 0 || clientId.length > MAX_URI_LENGTH) return undefined;
    const row = await this.db.selectFrom('oauth_clients').selectAll().where('client_id', '=', clientId).executeTakeFirst();
    if (row && (row.source === 'registered' || opts.stale || (row.fetched_at ?? 0) > now - DOCUMENT_LIFETIME_MS)) {
      return toClient(row.client_id, row.source, JSON.parse(row.metadata) as Metadata);
    }
    if (!isDocumentClientId(clientId)) return undefined;
    if (this.fetching >= MAX_FETCHES || !(await this.opts.fetches.take('oauth-documents')).ok) {
      throw new ClientMetadataError('temporarily_unavailable', 'the gateway is fetching many client metadata documents just now: try again in a minute');
    }
    this.fetching++;
    let metadata: Metadata;
    try {
      metadata = await this.fetchDocument(clientId);
    } finally {
      this.fetching--;
    }
    const text = JSON.stringify(metadata);
    if (!row) await this.makeRoom(now);
    await this.db
      .insertInto('oauth_clients')
      .values({ client_id: clientId, source: 'document', metadata: text, created_at: now, fetched_at: now, used_at: null })
      .onConflict((oc) => oc.column('client_id').doUpdateSet({ metadata: text, fetched_at: now }))
      .execute();
    return toClient(clientId, 'document', metadata);
  }

  /** Room for one more client never used: the expired go, and past the cap the oldest. */
  private async makeRoom(now: number): Promise<void> {
    await this.sweep(now);
    const unused = await this.db
      .selectFrom('oauth_clients')
      .select('client_id')
      .where('used_at', 'is', null)
      .orderBy('created_at', 'desc')
      .offset(Math.max(0, this.opts.maxPending - 1))
      .limit(1000)
      .execute();
    if (unused.length) await this.db.deleteFrom('oauth_clients').where('used_at', 'is', null).where('client_id', 'in', unused.map((u) => u.client_id)).execute();
  }

  /** Registers a client (RFC 7591): its id and the metadata taken. ClientMetadataError when refused. */
  async register(body: unknown, now = Date.now()): Promise<{ clientId: string; issuedAt: number; metadata: Metadata }> {
    const metadata = checkedMetadata(body);
    // Anyone may register: past the cap the oldest registration nobody used goes, so a flood cannot lock others out for long.
    await this.makeRoom(now);
    const clientId = `sgc_${crypto.randomBytes(16).toString('base64url')}`;
    await this.db.insertInto('oauth_clients').values({ client_id: clientId, source: 'registered', metadata: JSON.stringify(metadata), created_at: now, fetched_at: null, used_at: null }).execute();
    return { clientId, issuedAt: Math.floor(now / 1000), metadata };
  }

  /** A grant was made for the client: its registration is kept. */
  async markUsed(clientId: string, now = Date.now()): Promise<void> {
    await this.db.updateTable('oauth_clients').set({ used_at: now }).where('client_id', '=', clientId).execute();
  }

  /** Removes registrations and documents never used for a grant within UNUSED_REGISTRATION_MS. */
  async sweep(now = Date.now()): Promise<number> {
    const r = await this.db.deleteFrom('oauth_clients').where('used_at', 'is', null).where('created_at', '<', now - UNUSED_REGISTRATION_MS).executeTakeFirst();
    return Number(r.numDeletedRows);
  }

  private async fetchDocument(url: string): Promise<Metadata> {
    let body: string;
    try {
      const u = new URL(url);
      // Port 443 only, unless the LAN is allowed: a document URL must not probe other services' ports.
      if (u.port && u.port !== '443' && !this.opts.documentsFromPrivate) throw new Error(`port ${u.port} is not 443`);
      // An address given as such is never looked up, so the check at connect time does not see it: it is checked here.
      const host = u.hostname.replace(/^\[(.*)\]$/, '$1');
      if (net.isIP(host) && !isPublicAddress(host) && !this.opts.documentsFromPrivate) throw new Error(`${host} is a loopback, private or reserved address`);
      const res = await request(url, {
        dispatcher: this.agent,
        method: 'GET',
        headers: { accept: 'application/json' },
        maxRedirections: 0,
        headersTimeout: DOCUMENT_DEADLINE_MS,
        bodyTimeout: DOCUMENT_DEADLINE_MS,
        signal: AbortSignal.timeout(DOCUMENT_DEADLINE_MS),
      });
      if (res.statusCode !== 200) {
        res.body.destroy();
        throw new Error(`it answered HTTP ${res.statusCode}`);
      }
      const chunks: Buffer[] = [];
      let size = 0;
      for await (const c of res.body as AsyncIterable<Buffer>) {
        size += c.length;
        if (size > DOCUMENT_MAX_BYTES) {
          res.body.destroy();
          throw new Error(`it is larger than ${DOCUMENT_MAX_BYTES / 1024} KiB`);
        }
        chunks.push(c);
      }
      body = Buffer.concat(chunks).toString('utf8');
    } catch (e) {
      // Why it failed (a name's address, a refusal, a status) stays in the log: shown to anyone, it would map the network.
      throw new ClientMetadataError('invalid_client_metadata', `the app's metadata document could not be fetched from ${shown(url)}`, (e as Error).message);
    }
    let doc: unknown;
    try {
      doc = JSON.parse(body);
    } catch {
      throw new ClientMetadataError('invalid_client_metadata', `the app's metadata document at ${shown(url)} is not JSON`);
    }
    if (!isObject(doc) || doc.client_id !== url) throw new ClientMetadataError('invalid_client_metadata', `the metadata document at ${shown(url)} does not name that URL as its client_id`);
    if (doc.token_endpoint_auth_method !== undefined && doc.token_endpoint_auth_method !== 'none') {
      throw new ClientMetadataError('invalid_client_metadata', `the metadata document at ${shown(url)} asks for client authentication; this gateway takes public clients only (token_endpoint_auth_method none)`);
    }
    return checkedMetadata(doc);
  }
}
