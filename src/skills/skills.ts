/**
 * Skills: folders holding a SKILL.md whose YAML front matter names the skill and says in
 * one line what it is for. Built-in skills ship in the repository's skills/ (mounted at
 * /skills in every sandbox); a user's own live in their workspace at
 * /workspace/skills/<name>/SKILL.md. The server's instructions carry only the index
 * (name + one line); a model reads the full SKILL.md with read_file when it needs it.
 */
import fs from 'node:fs';
import fsp from 'node:fs/promises';
import path from 'node:path';
import { SKILLS_DIR } from '../paths.js';
import type { Workspace, WorkspaceEntry } from '../sandboxes/workspace.js';
import { WorkspaceError } from '../sandboxes/workspace.js';
import type { Logger } from '../logger.js';
import type { SandboxExecution } from '../sandboxes/execution.js';
import { allows } from '../sandboxes/permissions.js';
import type { SandboxOwner } from '../sandboxes/types.js';

/** The repository's skills/ directory. */
export const BUILTIN_SKILLS_DIR = SKILLS_DIR;

export interface SkillInfo {
  name: string;
  description: string;
  /** Where a model reads it: /skills/<name>/SKILL.md or /workspace/skills/<name>/SKILL.md. */
  path: string;
  origin: 'builtin' | 'user';
}

/** User skills the index lists at most; the rest are still readable. */
export const MAX_USER_SKILLS = 50;
const FRONT_MATTER_BYTES = 4096;
const MAX_DESCRIPTION = 200;

/**
 * Reads `name` and `description` from YAML front matter. Handles the subset skills use:
 * `key: value`, quoted values, and `>`/`|` blocks folded onto one line.
 */
export function parseFrontMatter(text: string): Record<string, string> {
  const m = /^---\r?\n([\s\S]*?)\r?\n---/.exec(text);
  if (!m) return {};
  const out: Record<string, string> = {};
  const lines = m[1]!.split(/\r?\n/);
  for (let i = 0; i < lines.length; i++) {
    const kv = /^([A-Za-z_][\w-]*):\s*(.*)$/.exec(lines[i]!);
    if (!kv) continue;
    let value = kv[2]!.trim();
    if (value === '>' || value === '|' || value === '>-' || value === '|-') {
      const block: string[] = [];
      while (i + 1 < lines.length && /^\s+\S/.test(lines[i + 1]!)) block.push(lines[++i]!.trim());
      value = block.join(' ');
    } else if (/^(['"]).*\1$/.test(value)) {
      value = value.slice(1, -1);
    }
    out[kv[1]!] = value;
  }
  return out;
}

function oneLine(s: string): string {
  const flat = s.replace(/\s+/g, ' ').trim();
  return flat.length > MAX_DESCRIPTION ? `${flat.slice(0, MAX_DESCRIPTION - 1)}…` : flat;
}

function toSkill(dirName: string, text: string, origin: SkillInfo['origin']): SkillInfo {
  const fm = parseFrontMatter(text);
  return {
    name: fm.name?.trim() || dirName,
    description: oneLine(fm.description ?? '') || '(no description: add YAML front matter with name and description)',
    path: origin === 'builtin' ? `/skills/${dirName}/SKILL.md` : `/workspace/skills/${dirName}/SKILL.md`,
    origin,
  };
}

/** The read-only /skills tree, served from a host directory the gateway trusts. */
export class SkillsDir {
  constructor(readonly root: string = BUILTIN_SKILLS_DIR) {}

  /** Normalises a path below /skills; refuses `..` above it. Returns it relative, '/'-separated. */
  relative(p: string): string {
    const parts: string[] = [];
    for (const seg of p.replace(/^\/skills\/?/, '').split('/')) {
      if (seg === '' || seg === '.') continue;
      if (seg === '..') {
        if (!parts.length) throw new WorkspaceError('EOUTSIDE', `"${p}" climbs out of /skills`);
        parts.pop();
      } else parts.push(seg);
    }
    return parts.join('/');
  }

  private async hostPath(rel: string): Promise<string> {
    const p = path.join(this.root, rel);
    const real = await fsp.realpath(p).catch(() => {
      throw new WorkspaceError('ENOENT', `no such file or directory: /skills/${rel}`);
    });
    const root = await fsp.realpath(this.root);
    if (real !== root && !real.startsWith(root + path.sep)) throw new WorkspaceError('EOUTSIDE', `"/skills/${rel}" leads outside /skills`);
    return real;
  }

  async stat(p: string): Promise<Omit<WorkspaceEntry, 'path'>> {
    const st = await fsp.stat(await this.hostPath(this.relative(p)));
    return { type: st.isDirectory() ? 'dir' : 'file', size: st.size, mtimeMs: st.mtimeMs };
  }

  async read(p: string, range: { offset?: number; length?: number } = {}): Promise<{ data: Buffer; size: number }> {
    const rel = this.relative(p);
    const fh = await fsp.open(await this.hostPath(rel), fs.constants.O_RDONLY);
    try {
      const st = await fh.stat();
      if (st.isDirectory()) throw new WorkspaceError('EISDIR', `"/skills/${rel}" is a directory; list it instead`);
      const offset = Math.max(0, Math.min(range.offset ?? 0, st.size));
      const length = Math.min(range.length ?? st.size - offset, st.size - offset);
      const data = Buffer.alloc(length);
      if (length > 0) await fh.read(data, 0, length, offset);
      return { data, size: st.size };
    } finally {
      await fh.close();
    }
  }

  async list(p = '', opts: { recursive?: boolean; limit?: number } = {}): Promise<WorkspaceEntry[]> {
    const rel = this.relative(p);
    const limit = opts.limit ?? 10_000;
    const out: WorkspaceEntry[] = [];
    const queue = [rel];
    while (queue.length && out.length < limit) {
      const dirRel = queue.shift()!;
      const entries = await fsp.readdir(await this.hostPath(dirRel), { withFileTypes: true }).catch((e: NodeJS.ErrnoException) => {
        if (e.code === 'ENOTDIR') throw new WorkspaceError('ENOTDIR', `"/skills/${dirRel}" is not a directory`);
        throw e;
      });
      entries.sort((a, b) => a.name.localeCompare(b.name));
      for (const d of entries) {
        if (out.length >= limit || !(d.isFile() || d.isDirectory())) continue;
        const childRel = dirRel ? `${dirRel}/${d.name}` : d.name;
        const st = await fsp.stat(path.join(this.root, childRel));
        out.push({ path: childRel, type: d.isDirectory() ? 'dir' : 'file', size: d.isDirectory() ? 0 : st.size, mtimeMs: st.mtimeMs });
        if (d.isDirectory() && opts.recursive) queue.push(childRel);
      }
    }
    return out;
  }

  /** Every built-in skill, by directory name. */
  async skills(): Promise<SkillInfo[]> {
    let dirs: fs.Dirent[];
    try {
      dirs = await fsp.readdir(this.root, { withFileTypes: true });
    } catch {
      return [];
    }
    const out: SkillInfo[] = [];
    for (const d of dirs.filter((x) => x.isDirectory()).sort((a, b) => a.name.localeCompare(b.name))) {
      const text = await fsp.readFile(path.join(this.root, d.name, 'SKILL.md'), 'utf8').catch(() => undefined);
      if (text !== undefined) out.push(toSkill(d.name, text.slice(0, FRONT_MATTER_BYTES), 'builtin'));
    }
    return out;
  }
}

/** A user's own skills, from /workspace/skills/<name>/SKILL.md. Missing folder: none. */
export async function userSkills(ws: Workspace): Promise<SkillInfo[]> {
  let dirs: WorkspaceEntry[];
  try {
    dirs = (await ws.list('skills')).filter((e) => e.type === 'dir');
  } catch (e) {
    if (e instanceof WorkspaceError) return [];
    throw e;
  }
  const out: SkillInfo[] = [];
  for (const d of dirs.slice(0, MAX_USER_SKILLS)) {
    const dirName = d.path.split('/').pop()!;
    try {
      const { data } = await ws.read(`${d.path}/SKILL.md`, { length: FRONT_MATTER_BYTES });
      out.push(toSkill(dirName, data.toString('utf8'), 'user'));
    } catch (e) {
      if (!(e instanceof WorkspaceError)) throw e;
    }
  }
  return out;
}

/**
 * The skills a user sees, built in and their own (/workspace/skills), as far as their
 * permission ceiling lets them read each: the index the MCP instructions and the
 * agent's system prompt carry.
 */
export async function skillsFor(
  deps: { skills: SkillsDir; sandboxes: Pick<SandboxExecution, 'ceiling' | 'openWorkspace'>; logger: Logger },
  owner: SandboxOwner,
): Promise<SkillInfo[]> {
  const ceiling = await deps.sandboxes.ceiling(owner);
  const builtin = allows(ceiling, 'read', '/skills') ? await deps.skills.skills() : [];
  let own: SkillInfo[] = [];
  if (allows(ceiling, 'read', '/workspace/skills')) {
    // A workspace that cannot be opened must not keep a client from connecting.
    try {
      own = await userSkills(await deps.sandboxes.openWorkspace(owner));
    } catch (e) {
      deps.logger.warn({ err: e, user: owner.name }, 'could not read the user skills for the index');
    }
  }
  return [...builtin, ...own];
}
