/**
 * The skills a user sees (built in, and their own in /workspace/skills), offered to MCP
 * clients two more ways besides the instructions' index:
 *
 * - as **prompts**, which clients show as commands (`/sandgate:<skill>` in Claude Code):
 *   getting one gives the skill's SKILL.md as a user message, with the task typed after it;
 * - through the **skills extension** (SEP-2640, `io.modelcontextprotocol/skills`, the
 *   SDK's SkillsExtension), to a client that negotiates it: `skills/list` and
 *   `skills/get`, each file a `skill://` resource (`skill://builtin/<name>/…`,
 *   `skill://user/<name>/…`).
 *
 * Both read per request, as the caller's permissions allow (a ceiling without read on
 * /skills or /workspace/skills lists none of those), and every text passes the model
 * boundary as the workspace resources' do.
 */
import { ProtocolError, ProtocolErrorCode, type McpServer } from '@modelcontextprotocol/server';
import { SkillsExtension, type Skill, type SkillSource } from '@modelcontextprotocol/server/ext/skills';
import { allows } from '../sandboxes/permissions.js';
import { WorkspaceError } from '../sandboxes/workspace.js';
import { skillsFor, type SkillInfo } from '../skills/skills.js';
import { fromModel, forCall, toModel, type ToolContext } from './context.js';
import { mimeTypeOf } from './mime.js';

/** The largest skill file served whole (a SKILL.md is a page or two). */
const MAX_SKILL_FILE_BYTES = 256 * 1024;

/** A prompt name per skill: its own, and a user's skill that shares a built-in one's name gets `my-` before it. */
function promptNames(skills: SkillInfo[]): Map<string, SkillInfo> {
  const out = new Map<string, SkillInfo>();
  for (const s of skills.filter((x) => x.origin === 'builtin')) out.set(s.name, s);
  for (const s of skills.filter((x) => x.origin === 'user')) out.set(out.has(s.name) ? `my-${s.name}` : s.name, s);
  return out;
}

/** The folder a skill lives in, below /skills or /workspace. */
const dirOf = (s: SkillInfo) => s.path.replace(/\/SKILL\.md$/, '');

/** Reads a file of a skill, `rel` below its folder; undefined when there is none (or it may not be read). */
async function readSkillFile(ctx: ToolContext, origin: SkillInfo['origin'], name: string, rel: string): Promise<Buffer | undefined> {
  if (!/^[A-Za-z0-9._-]{1,100}$/.test(name) || name.startsWith('.')) return undefined;
  const ceiling = await ctx.sandboxes.ceiling(ctx.owner);
  try {
    if (origin === 'builtin') {
      if (!allows(ceiling, 'read', '/skills')) return undefined;
      const st = await ctx.skills.stat(`${name}/${rel}`);
      if (st.type !== 'file' || st.size > MAX_SKILL_FILE_BYTES) return undefined;
      return (await ctx.skills.read(`${name}/${rel}`)).data;
    }
    if (!allows(ceiling, 'read', `/workspace/skills/${name}/${rel}`)) return undefined;
    const ws = await ctx.sandboxes.openWorkspace(ctx.owner);
    const st = await ws.stat(`skills/${name}/${rel}`);
    if (st.type !== 'file' || st.size > MAX_SKILL_FILE_BYTES) return undefined;
    return (await ws.read(`skills/${name}/${rel}`)).data;
  } catch (e) {
    if (e instanceof WorkspaceError || (e as NodeJS.ErrnoException).code === 'ENOENT' || (e as NodeJS.ErrnoException).code === 'ENOTDIR') return undefined;
    throw e;
  }
}

/** Prompts: one per skill the caller may read. */
export function registerSkillPrompts(server: McpServer, ctx: ToolContext): void {
  server.server.registerCapabilities({ prompts: { listChanged: false } });
  server.server.setRequestHandler('prompts/list', async () => {
    const names = promptNames(await skillsFor(ctx, ctx.owner));
    const prompts = await Promise.all(
      [...names].map(async ([name, s]) => ({
        name,
        title: `Skill: ${s.name}${s.origin === 'user' ? ' (yours)' : ''}`,
        description: await toModel(ctx, s.description || `The ${s.name} skill`),
        arguments: [{ name: 'task', description: 'What to do with the skill (optional)', required: false }],
      })),
    );
    return { prompts };
  });
  server.server.setRequestHandler('prompts/get', async (request) => {
    const call = forCall(ctx);
    const name = request.params.name;
    const skill = promptNames(await skillsFor(ctx, ctx.owner)).get(name);
    if (!skill) throw new ProtocolError(ProtocolErrorCode.InvalidParams, `no skill "${String(name).slice(0, 100)}" (prompts/list names them)`);
    const text = await readSkillFile(ctx, skill.origin, skill.name, 'SKILL.md');
    if (!text) throw new ProtocolError(ProtocolErrorCode.InvalidParams, `the skill "${skill.name}" has no readable SKILL.md`);
    const task = typeof request.params.arguments?.task === 'string' ? await fromModel(call, request.params.arguments.task.slice(0, 10_000)) : '';
    const body = `Use the "${skill.name}" skill. Its instructions follow; its other files are in ${dirOf(skill)}/ (read them with read_file, or from code).\n\n${text.toString('utf8')}${task ? `\n\nThe task: ${task}` : ''}`;
    return {
      description: await toModel(call, skill.description || `The ${skill.name} skill`),
      messages: [{ role: 'user' as const, content: { type: 'text' as const, text: await toModel(call, body) } }],
    };
  });
}

const SKILL_URI = /^skill:\/\/(builtin|user)\/([A-Za-z0-9._-]{1,100})\/(.+)$/;

/** The skills extension's source: the caller's skills, per request, each file read through readSkillFile. */
function skillSource(ctx: ToolContext): SkillSource {
  const entry = async (s: SkillInfo): Promise<Skill> => ({
    uri: `skill://${s.origin}/${s.name}/SKILL.md`,
    frontmatter: { name: await toModel(ctx, s.name), description: await toModel(ctx, s.description || `The ${s.name} skill`) },
    resources: 'dynamic',
  });
  const parse = (uri: string) => {
    const m = SKILL_URI.exec(uri);
    if (!m || m[3]!.split('/').some((seg) => seg === '..' || seg === '.' || seg === '')) return undefined;
    return { origin: m[1] as SkillInfo['origin'], name: m[2]!, rel: m[3]! };
  };
  return {
    async list() {
      return { skills: await Promise.all((await skillsFor(ctx, ctx.owner)).map(entry)) };
    },
    async get(uri) {
      const p = parse(uri);
      if (!p || p.rel !== 'SKILL.md') return undefined;
      const s = (await skillsFor(ctx, ctx.owner)).find((x) => x.origin === p.origin && x.name === p.name);
      return s && entry(s);
    },
    async read(uri) {
      const p = parse(uri);
      if (!p) return undefined;
      const data = await readSkillFile(ctx, p.origin, p.name, p.rel);
      if (!data) return undefined;
      const mimeType = p.rel.endsWith('.md') ? 'text/markdown' : mimeTypeOf(p.rel);
      const text = new TextDecoder('utf-8', { fatal: true });
      try {
        return { text: await toModel(ctx, text.decode(data)), mimeType };
      } catch {
        return { bytes: new Uint8Array(data), mimeType };
      }
    },
  };
}

/** The skills extension, for clients that negotiate it. Listing a skill's files is left to list_files (the entries are `dynamic`). */
export function registerSkillsExtension(server: McpServer, ctx: ToolContext): void {
  new SkillsExtension({ source: skillSource(ctx), cacheHint: { ttlMs: 60_000, cacheScope: 'private' }, onWarning: (w) => ctx.logger.debug({ warning: w }, 'skills extension') }).attach(server);
}
