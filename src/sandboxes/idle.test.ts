import { describe, expect, it } from 'vitest';
import { configFor } from '../config.js';
import { createLogger } from '../logger.js';
import { Held } from './held.js';
import { Idle } from './idle.js';
import type { Live, UserSandbox } from './live.js';

/** A user's sandbox as the freezer sees it, recording every time something marks it frozen. */
function sandbox(): { live: Live; frozenWrites: boolean[] } {
  const frozenWrites: boolean[] = [];
  let frozen: boolean | undefined;
  const live = {
    handle: { id: 'no-such-container', exited: false },
    owner: { userId: 7, name: 'ann' },
    running: 0,
    queue: { waiting: 0 },
    get frozen() {
      return frozen;
    },
    set frozen(v: boolean | undefined) {
      frozen = v;
      frozenWrites.push(!!v);
    },
  } as unknown as UserSandbox;
  return { live, frozenWrites };
}

const idleWith = (mayAct?: (live: Live) => boolean) =>
  new Idle({ config: configFor({ SANDGATE_FREEZE_AFTER_MS: '10' }), log: createLogger('silent'), held: new Held(), gatewayId: 'test', mayAct });

const settle = () => new Promise((r) => setTimeout(r, 100));

describe('idle freezing and the sandbox lease', () => {
  it('freezes a sandbox this gateway may act on', async () => {
    const { live, frozenWrites } = sandbox();
    idleWith(() => true).rest(live);
    await settle();
    // Marked frozen when the freeze began (it then failed: there is no such container here).
    expect(frozenWrites[0]).toBe(true);
  });

  it('never freezes a sandbox whose lease this gateway no longer holds (a replica paused past its lease, waking with a freeze due)', async () => {
    const { live, frozenWrites } = sandbox();
    let holds = true;
    idleWith(() => holds).rest(live);
    // The freeze was due when the lease lapsed: another replica may have adopted the container.
    holds = false;
    await settle();
    expect(frozenWrites).toEqual([]);
  });

  it('never freezes a sandbox it let go', async () => {
    const { live, frozenWrites } = sandbox();
    idleWith(() => true).rest(live);
    (live as UserSandbox).letGo = true;
    await settle();
    expect(frozenWrites).toEqual([]);
  });
});
