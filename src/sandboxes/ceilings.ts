/**
 * Permission ceilings: the most a user's code may be granted (their own row, else the
 * configured default), and what a container for that ceiling mounts. A request narrows
 * its ceiling per run; the mounts follow the ceiling, so a changed ceiling means a new
 * container.
 */
import type { Config } from '../config.js';
import type { Db } from '../store/store.js';
import { getUser, type User } from '../accounts/accounts.js';
import { allows, parsePermissions, widenPermissions, type Permissions } from './permissions.js';
import type { SandboxOwner, SandboxSpec } from './types.js';

export async function ceilingOf(db: Db, config: Config, owner: SandboxOwner): Promise<Permissions> {
  return ceilingFrom(await getUser(db, owner.userId), config);
}

/**
 * The ceiling of a user row already read (undefined: an unknown user, who gets the
 * default): their own row, else the default, widened by the grants of each GitHub team
 * they were in at their last check (SANDGATE_TEAM_PERMISSIONS).
 */
export function ceilingFrom(user: Pick<User, 'permissions'> & Partial<Pick<User, 'githubTeams'>> | undefined, config: Pick<Config, 'defaultPermissions' | 'teamPermissions'>): Permissions {
  let ceiling = parsePermissions(user?.permissions ?? config.defaultPermissions);
  if (user?.githubTeams?.length && config.teamPermissions) {
    const teams = teamGrants(config.teamPermissions);
    for (const team of user.githubTeams) {
      const grants = teams.get(team.toLowerCase());
      if (grants) ceiling = widenPermissions(ceiling, grants);
    }
  }
  return ceiling;
}

let parsedTeams: { text: string; grants: Map<string, Permissions> } | undefined;

/** SANDGATE_TEAM_PERMISSIONS by team (lower case), parsed once. */
function teamGrants(text: string): Map<string, Permissions> {
  if (parsedTeams?.text !== text) {
    const raw = JSON.parse(text) as Record<string, unknown>;
    parsedTeams = { text, grants: new Map(Object.entries(raw).map(([team, p]) => [team.toLowerCase(), parsePermissions(p)])) };
  }
  return parsedTeams.grants;
}

export function defaultCeiling(config: Config): Permissions {
  return parsePermissions(config.defaultPermissions);
}

/** Equal for equal ceilings: a container made for one serves the other. */
export function ceilingKey(ceiling: Permissions): string {
  return JSON.stringify(ceiling);
}

/** Whether a container for `ceiling` mounts /workspace read-write. */
export function workspaceWritable(ceiling: Permissions): boolean {
  return allows(ceiling, 'write', '/workspace');
}

/** The mounts of a container made for `ceiling`: only what it may read, read-only unless it may write. */
export function mountsFor(
  ceiling: Permissions,
  dirs: { workspace: string; skills: string; tools: string },
): Pick<SandboxSpec, 'workspaceDir' | 'workspaceWritable' | 'readOnlyMounts'> {
  const readOnlyMounts: Record<string, string> = {};
  if (allows(ceiling, 'read', '/skills')) readOnlyMounts['/skills'] = dirs.skills;
  if (allows(ceiling, 'read', '/tools')) readOnlyMounts['/tools'] = dirs.tools;
  const writable = workspaceWritable(ceiling);
  const readable = allows(ceiling, 'read', '/workspace');
  return { workspaceDir: readable || writable ? dirs.workspace : undefined, workspaceWritable: writable, readOnlyMounts };
}
