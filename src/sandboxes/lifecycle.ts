/**
 * When a user's sandbox is stopped without being asked: idle past `idleTimeoutSec`, or
 * older than `maxLifetimeSec` (replaced at its next idle moment). Never while a run is in
 * it or waiting for it.
 */
import type { Config } from '../config.js';
import type { UserSandbox } from './live.js';

/** Why `sb` should stop now, or undefined to keep it. */
export function stopReason(sb: UserSandbox, config: Config, now = Date.now()): string | undefined {
  if (sb.running > 0 || sb.queue.waiting > 0) return undefined;
  if (now - sb.lastActivity > config.idleTimeoutSec * 1000) return 'idle';
  if (now - sb.startedAt > config.maxLifetimeSec * 1000) return 'maximum lifetime reached';
  return undefined;
}

/** How often the reaper looks: often enough to stop an idle sandbox within a quarter of the timeout. */
export function reapIntervalMs(config: Config): number {
  return Math.min(30_000, (config.idleTimeoutSec * 1000) / 4);
}
