/**
 * The server instructions a client puts in the model's context at connect time: how
 * sandgate is meant to be used, and the skills index. Kept short on purpose; everything
 * else is discovered on demand (search_tools, read_file on a SKILL.md).
 */
import type { SkillInfo } from './skills.js';

export const INSTRUCTIONS_PREAMBLE = `sandgate runs your code in a private, persistent sandbox (no network) with your files in /workspace.
- execute_code runs python (state persists between calls, like a notebook), typescript/javascript (Deno) or bash.
- read_file, write_file and list_files work on /workspace (yours) and /skills (read-only).
- Upstream MCP tools are not loaded here: find them with search_tools, then call them from execute_code through their typed wrappers under /tools/servers/. Filter and aggregate data in code; return only the small result you need.`;

export function buildInstructions(skills: SkillInfo[]): string {
  if (!skills.length) return INSTRUCTIONS_PREAMBLE;
  const lines = skills.map((s) => `- ${s.name}: ${s.description} (${s.path})`);
  return `${INSTRUCTIONS_PREAMBLE}\n\nSkills (read a skill's SKILL.md with read_file before you follow it):\n${lines.join('\n')}`;
}
