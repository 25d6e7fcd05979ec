/**
 * Live updates sealed on their way through the database. socket.io's Postgres adapter
 * passes every update a gateway emits to the others through NOTIFY, and larger ones
 * through a row of `live_attachments`; those updates are parts of pages, with personal
 * data restored. Sealed here (AES-256-GCM, src/secrets/aead.ts, under a key every
 * replica derives from the installation's replica key), the database and anyone reading
 * its traffic see only which namespace and kind of message passed, never what it said.
 *
 * The adapter is the library's own; this wraps the two calls it publishes with and the
 * one it receives with. Each message keeps its sender's uid, namespace and type in clear
 * (the adapter routes by them), and they are bound to the sealed rest, so a sealed body
 * cannot be replayed under another header. A message that does not open is dropped.
 */
import type { createAdapter } from '@socket.io/postgres-adapter';
import { open, seal } from '../../secrets/aead.js';

type AdapterFactory = ReturnType<typeof createAdapter>;

interface Message {
  uid?: string;
  nsp?: string;
  type?: number;
  sealed?: string;
  [k: string]: unknown;
}

/** The adapter's publishing and receiving calls (protected in its types). */
interface Hooks {
  doPublish(message: Message): Promise<string>;
  doPublishResponse(requesterUid: string, response: Message): Promise<void>;
  onMessage(message: Message, offset?: string): unknown;
}

const aad = (m: Message) => Buffer.from(`sandgate live|${m.uid ?? ''}|${m.nsp ?? ''}|${String(m.type ?? '')}`);

export function sealMessage(key: Buffer, message: Message): Message {
  const { uid, nsp, type, ...rest } = message;
  const header = { uid, nsp, type };
  return { ...header, sealed: seal(key, JSON.stringify(rest), aad(header)).toString('base64') };
}

/** The message as sent, or undefined when it is not one sealed under `key` with its header. */
export function openMessage(key: Buffer, message: Message): Message | undefined {
  if (typeof message.sealed !== 'string') return undefined;
  const { uid, nsp, type } = message;
  try {
    const rest = JSON.parse(open(key, Buffer.from(message.sealed, 'base64'), aad({ uid, nsp, type })).toString('utf8')) as Record<string, unknown>;
    return { ...rest, uid, nsp, type };
  } catch {
    return undefined;
  }
}

/** `factory`'s adapters, with every message sealed under `key` before it leaves and opened as it arrives. */
export function sealedAdapter(factory: AdapterFactory, key: Buffer, dropped: (why: string) => void): AdapterFactory {
  // socket.io calls it with `new`: a function, not an arrow, that returns the adapter.
  return function sealed(nsp: Parameters<AdapterFactory>[0]) {
    const adapter = factory(nsp);
    const hooks = adapter as unknown as Hooks;
    const publish = hooks.doPublish.bind(adapter);
    const publishResponse = hooks.doPublishResponse.bind(adapter);
    const receive = hooks.onMessage.bind(adapter);
    hooks.doPublish = (m) => publish(sealMessage(key, m));
    hooks.doPublishResponse = (uid, r) => publishResponse(uid, sealMessage(key, r));
    hooks.onMessage = (m, offset) => {
      const opened = openMessage(key, m);
      if (!opened) return dropped('a live update from the database did not open with this installation’s key');
      return receive(opened, offset);
    };
    return adapter;
  } as unknown as AdapterFactory;
}
