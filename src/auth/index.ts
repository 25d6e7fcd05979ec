/**
 * Which ways of signing in are on, decided from the settings in this one place: GitHub
 * when a GitHub OAuth app is set (SANDGATE_GITHUB_CLIENT_ID), and always the one-time
 * link (the local user's on an install without GitHub; on a GitHub install a link made
 * with the CLI still has to pass the membership check). The sign-in page offers a button
 * for each one that starts at a provider, in this order.
 */
import type { Config } from '../config.js';
import type { Logger } from '../logger.js';
import type { Db } from '../store/store.js';
import type { Authenticator } from './authenticator.js';
import { GitHubAuthenticator } from './github-authenticator.js';
import { LinkAuthenticator } from './link-authenticator.js';
import type { Membership } from './membership.js';

export interface Authenticators {
  /** Every way of signing in that is on. */
  all: Authenticator[];
  /** The one-time link, whose page the sign-in routes show before it completes. */
  link: LinkAuthenticator;
}

export function authenticatorsFor(deps: { config: Config; db: Db; logger: Logger; membership: Membership }): Authenticators {
  const link = new LinkAuthenticator(deps);
  const all: Authenticator[] = [];
  if (deps.membership.github) all.push(new GitHubAuthenticator(deps));
  all.push(link);
  return { all, link };
}
