import { describe, expect, it } from 'vitest';
import { buildInstructions } from './instructions.js';
import { parseFrontMatter, SkillsDir } from './skills.js';

describe('parseFrontMatter', () => {
  it('reads plain, quoted and folded values', () => {
    expect(parseFrontMatter('---\nname: x\ndescription: "does y: well"\n---\nbody')).toEqual({ name: 'x', description: 'does y: well' });
    expect(parseFrontMatter('---\nname: x\ndescription: >\n  first line\n  second line\nother: z\n---\n')).toEqual({ name: 'x', description: 'first line second line', other: 'z' });
    expect(parseFrontMatter('no front matter')).toEqual({});
  });
});

describe('built-in skills', () => {
  it('ship with a name and a one-line description each', async () => {
    const skills = await new SkillsDir().skills();
    expect(skills.map((s) => s.name)).toEqual(expect.arrayContaining(['data-analysis', 'calling-mcp-tools']));
    for (const s of skills) {
      expect(s.description.length).toBeGreaterThan(20);
      expect(s.description).not.toMatch(/\n/);
      expect(s.path).toBe(`/skills/${s.name}/SKILL.md`);
    }
  });

  it('are readable but never outside /skills', async () => {
    const dir = new SkillsDir();
    const { data } = await dir.read('/skills/data-analysis/SKILL.md');
    expect(data.toString()).toMatch(/^---\nname: data-analysis/);
    await expect(dir.read('/skills/../package.json')).rejects.toThrow(/climbs out/);
    expect((await dir.list('/skills')).map((e) => e.path)).toEqual(expect.arrayContaining(['data-analysis', 'calling-mcp-tools']));
  });

  it('make a compact index in the instructions', async () => {
    const text = buildInstructions(await new SkillsDir().skills());
    expect(text).toMatch(/- data-analysis: .* \(\/skills\/data-analysis\/SKILL\.md\)/);
    expect(text.split('\n').length).toBeLessThan(15);
  });
});
