import { describe, expect, it } from 'vitest';
import { configFor } from '../config.js';
import { ModelCatalog, type KeyLookup, type ProviderId } from './models.js';

const keys = (own: Record<number, ProviderId[]>): KeyLookup => ({
  has: async (u, p) => (own[u] ?? []).includes(p),
  get: async (u, p) => ((own[u] ?? []).includes(p) ? `own-${u}-${p}` : undefined),
});

describe('ModelCatalog', () => {
  it('offers a default model for each provider a key reaches, the team’s or the user’s own', async () => {
    const c = new ModelCatalog(configFor({ SANDGATE_ANTHROPIC_API_KEY: 'team' }), keys({ 2: ['openai'] }));
    expect((await c.availableTo(1)).map((m) => m.id)).toEqual(['anthropic:claude-sonnet-4-5']);
    expect((await c.availableTo(2)).map((m) => m.id)).toEqual(['anthropic:claude-sonnet-4-5', 'openai:gpt-4.1']);
    expect(await c.languageModel(c.find('openai:gpt-4.1')!, 1)).toBeUndefined();
    expect((await c.languageModel(c.find('openai:gpt-4.1')!, 2))?.keyOwner).toBe('user');
    expect((await c.languageModel(c.find('anthropic:claude-sonnet-4-5')!, 2))?.keyOwner).toBe('team');
  });

  it('offers nothing when no key is set, and names the settings', async () => {
    const c = new ModelCatalog(configFor({}));
    expect(await c.availableTo(1)).toEqual([]);
    expect(await c.defaultFor(1)).toBeUndefined();
  });

  it('takes an explicit list with an OpenAI-compatible server under its own name, and a default model', async () => {
    const c = new ModelCatalog(
      configFor({ SANDGATE_COMPATIBLE_BASE_URL: 'http://localhost:11434/v1', SANDGATE_COMPATIBLE_NAME: 'ollama', SANDGATE_MODELS: 'ollama:qwen2.5, gemini:gemini-2.5-pro', SANDGATE_DEFAULT_MODEL: 'ollama:qwen2.5' }),
    );
    expect(c.all.map((m) => [m.id, m.provider, m.model])).toEqual([
      ['ollama:qwen2.5', 'compatible', 'qwen2.5'],
      ['gemini:gemini-2.5-pro', 'gemini', 'gemini-2.5-pro'],
    ]);
    expect((await c.availableTo(1)).map((m) => m.id)).toEqual(['ollama:qwen2.5']);
    expect((await c.defaultFor(1))?.id).toBe('ollama:qwen2.5');
  });

  it.each([
    [{ SANDGATE_MODELS: 'gpt-4.1' }, /SANDGATE_MODELS has "gpt-4.1", which is not <provider>:<model>/],
    [{ SANDGATE_MODELS: 'mistral:large' }, /provider of anthropic, openai, gemini, local/],
    [{ SANDGATE_MODELS: 'local:qwen' }, /SANDGATE_COMPATIBLE_BASE_URL is empty/],
    [{ SANDGATE_COMPATIBLE_BASE_URL: 'http://h:1/v1' }, /SANDGATE_MODELS lists none of its models: add them as local:<model>/],
    [{ SANDGATE_DEFAULT_MODEL: 'openai:gpt-9' }, /SANDGATE_DEFAULT_MODEL=openai:gpt-9 is not one of the models offered/],
    [{ SANDGATE_COMPATIBLE_NAME: 'openai' }, /SANDGATE_COMPATIBLE_NAME=openai is the name of another provider/],
  ])('refuses %o at start, naming the setting', (env, message) => {
    expect(() => new ModelCatalog(configFor(env))).toThrow(message);
  });

  it('refuses a base URL that is not a URL, naming the setting', () => {
    expect(() => configFor({ SANDGATE_OPENAI_BASE_URL: 'localhost:8000' })).toThrow(/SANDGATE_OPENAI_BASE_URL="localhost:8000" is invalid/);
  });
});
