/**
 * A workspaces folder with the store id of one another live replica uses, but not that
 * folder (a data directory or a disk copied from another host): both would take the users'
 * files for their own, each serving them from its own copy.
 *
 * The replica writes a probe into its folder and asks the others on its store id to read
 * it through theirs (`storeShared`, over the hop); when one answers without it, the two
 * folders are not one. Of two such replicas, the one that started later is the one
 * refused: at its start (`atStart`, which the gateway turns into an exit), or, when the
 * older one was not running then (paused, cut off, or starting at the same moment), as
 * soon as it shows up among the live replicas (`watch`): a running replica looks every
 * few seconds for replicas on its store that started before it and that it has not asked
 * (or that did not answer), and stops only when one does not see its probe twice in a row.
 */
import { ConfigError } from '../errors.js';
import type { Logger } from '../logger.js';
import type { HopSigner } from '../replicas/hop-auth.js';
import type { Replica, ReplicaInfo } from '../replicas/leases.js';
import { storeShared } from './remote.js';
import type { WorkspaceStore } from './types.js';

/** How often a running replica looks for replicas on its store it has not asked yet. */
export const STORE_WATCH_MS = 5_000;

export class StoreCopyCheck {
  /** Replicas asked (they answered) or seen at start: never asked again. */
  private readonly asked = new Set<string>();
  private timer?: NodeJS.Timeout;
  private looking = false;
  /** A replica found once not to see this one's probe: asked again before this gateway is stopped. */
  private suspect?: string;

  constructor(
    private readonly replica: Replica,
    private readonly hop: HopSigner,
    private readonly volumes: Pick<WorkspaceStore, 'storeId' | 'probes'>,
    private readonly log: Logger,
    private readonly o: { withinMs?: number; everyMs?: number } = {},
  ) {}

  /** At start, before this replica is registered: a ConfigError when a live replica on its store has another folder. */
  async atStart(): Promise<void> {
    const live = (await this.replica.live()).filter((r) => this.onMyStore(r));
    // Asked now: those that do not answer (or cannot tell) are asked again by the watch.
    for (const r of live) this.asked.add(r.id);
    const copied = await this.ask(live);
    if (copied) throw new ConfigError(copied.message);
  }

  /**
   * From now on, until `stop`: a replica on this store that started before this one (and
   * was not running at its start) is asked to read this one's probe; `onCopied` gets what
   * to tell the operator when it does not find it, twice in a row (a gateway that serves
   * is stopped only on a second look: one slow to see a new file, the first time, does
   * not stop it). Once said, the watch ends.
   */
  watch(onCopied: (message: string) => void): void {
    if (!this.volumes.probes || this.timer) return;
    this.timer = setInterval(() => {
      if (this.looking) return;
      this.looking = true;
      this.look()
        .then((copied) => {
          if (!copied) return;
          this.stop();
          onCopied(copied);
        })
        .catch((e: unknown) => this.log.warn({ err: e }, 'could not check whether another replica’s workspaces folder is this one'))
        .finally(() => (this.looking = false));
    }, this.o.everyMs ?? STORE_WATCH_MS);
    this.timer.unref();
  }

  stop(): void {
    clearInterval(this.timer);
  }

  private async look(): Promise<string | undefined> {
    const live = await this.replica.live();
    const me = live.find((r) => r.id === this.replica.id);
    if (!me) return undefined;
    const older = live.filter((r) => this.onMyStore(r) && !this.asked.has(r.id) && (r.startedAt < me.startedAt || (r.startedAt === me.startedAt && r.id < me.id)));
    if (!older.length) return undefined;
    this.log.info({ replicas: older.map((r) => r.id), store: this.volumes.storeId }, 'replicas that started before this one are on its workspace store: checking that they use this folder');
    const copied = await this.ask(older);
    if (!copied) {
      this.suspect = undefined;
      return undefined;
    }
    if (this.suspect === copied.replica) return copied.message;
    // Asked again at the next look, before this gateway is stopped.
    this.suspect = copied.replica;
    this.log.warn({ replica: copied.replica, store: this.volumes.storeId }, 'a replica on this workspace store does not see this gateway’s probe in its folder: asking again before stopping');
    return undefined;
  }

  private onMyStore(r: ReplicaInfo): boolean {
    return r.id !== this.replica.id && !!r.internalUrl && !!this.volumes.storeId && r.workspaceStore === this.volumes.storeId;
  }

  /** Which of `live` has another folder under this store id, and what to tell the operator; undefined when they share it or none answered. */
  private async ask(live: ReplicaInfo[]): Promise<{ replica: string; message: string } | undefined> {
    const probes = this.volumes.probes;
    const store = this.volumes.storeId;
    if (!probes || !store || !live.length) return undefined;
    const others = live.map((r) => ({ id: r.id, internalUrl: r.internalUrl! }));
    const word = probes.write(this.replica.id);
    try {
      const r = await storeShared(others, word, { signer: this.hop, selfId: this.replica.id, store, withinMs: this.o.withinMs });
      if (r.result !== 'differs') {
        // Those that said nothing (or could not tell) are asked again at the next look.
        for (const o of others) if (!r.answered.includes(o.id)) this.asked.delete(o.id);
        if (r.result === 'unknown') this.log.warn({ replicas: others.map((o) => o.id), store }, 'no replica on this workspace store answered to confirm it shares this folder');
        for (const id of r.answered) this.asked.add(id);
        return undefined;
      }
      const host = live.find((o) => o.id === r.replica)?.sandboxHost ?? 'another host';
      return {
        replica: r.replica,
        message:
          `this gateway's workspaces folder has the workspace store id (${store}) of the folder the gateway ${r.replica} on ${host} uses, but it is another folder: one of the two was copied from the other (a data directory or a disk). ` +
          'On the host set up by copying, remove workspaces/.store-id from the data directory before its gateway starts (its folder is then a store of its own: copy only the key files to set up a host); or mount the one folder on both',
      };
    } finally {
      probes.remove(this.replica.id);
    }
  }
}
