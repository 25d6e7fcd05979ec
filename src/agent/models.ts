/**
 * The models the built-in agent offers, and the language model behind each, through the
 * Vercel AI SDK's provider packages (@ai-sdk/anthropic, @ai-sdk/openai, @ai-sdk/google,
 * @ai-sdk/openai-compatible): one streaming interface for every provider, retries that
 * honour Retry-After, and no provider HTTP written here.
 *
 * A model id is `<provider>:<model>`: anthropic:claude-sonnet-4-5, openai:gpt-4.1,
 * gemini:gemini-2.5-flash, or <SANDGATE_COMPATIBLE_NAME>:<model> for an OpenAI-compatible
 * server (Ollama, vLLM, LM Studio, OpenRouter). A model is available to a user when its
 * provider has a key for them: their own (provider-keys.ts) or the team's setting; an
 * OpenAI-compatible server needs only its base URL.
 */
import { createAnthropic } from '@ai-sdk/anthropic';
import { createGoogleGenerativeAI } from '@ai-sdk/google';
import { createOpenAI } from '@ai-sdk/openai';
import { createOpenAICompatible } from '@ai-sdk/openai-compatible';
import { wrapLanguageModel, type LanguageModel } from 'ai';
import type { Config } from '../config.js';
import { ConfigError } from '../errors.js';
import { boundedModel, yieldingFetch } from './model-bounds.js';

export const PROVIDERS = ['anthropic', 'openai', 'gemini', 'compatible'] as const;
export type ProviderId = (typeof PROVIDERS)[number];
/** Providers whose users may bring their own key. */
export const KEYED_PROVIDERS = ['anthropic', 'openai', 'gemini', 'compatible'] as const satisfies readonly ProviderId[];

/** Offered when SANDGATE_MODELS is empty, for each provider with a key. */
export const DEFAULT_MODELS: Record<Exclude<ProviderId, 'compatible'>, string> = {
  anthropic: 'claude-sonnet-4-5',
  openai: 'gpt-4.1',
  gemini: 'gemini-2.5-flash',
};

const PROVIDER_LABELS: Record<ProviderId, string> = { anthropic: 'Anthropic', openai: 'OpenAI', gemini: 'Google Gemini', compatible: 'OpenAI-compatible server' };
const KEY_SETTINGS: Record<ProviderId, string> = {
  anthropic: 'SANDGATE_ANTHROPIC_API_KEY',
  openai: 'SANDGATE_OPENAI_API_KEY',
  gemini: 'SANDGATE_GEMINI_API_KEY',
  compatible: 'SANDGATE_COMPATIBLE_API_KEY',
};

export interface ModelChoice {
  /** `<provider name>:<model>`, as settings, pickers and the /v1 API name it. */
  id: string;
  provider: ProviderId;
  /** The provider's own name for the model. */
  model: string;
}

/** What to tell someone who asks for a model when none is set up. */
export const NO_MODELS_MESSAGE =
  'No model provider is configured on this gateway: an operator sets SANDGATE_ANTHROPIC_API_KEY, SANDGATE_OPENAI_API_KEY or SANDGATE_GEMINI_API_KEY, ' +
  'or SANDGATE_COMPATIBLE_BASE_URL with its models in SANDGATE_MODELS (or you add your own key for a provider).';

export function providerLabel(p: ProviderId): string {
  return PROVIDER_LABELS[p];
}

export function keySetting(p: ProviderId): string {
  return KEY_SETTINGS[p];
}

/** A user's own keys, by provider (provider-keys.ts, in the store). */
export interface KeyLookup {
  has(userId: number, provider: ProviderId): Promise<boolean>;
  get(userId: number, provider: ProviderId): Promise<string | undefined>;
}

export class ModelCatalog {
  /** Every model configured, whether or not a key reaches it. */
  readonly all: ModelChoice[];
  private readonly explicit: boolean;
  private readonly cache = new Map<string, LanguageModel>();

  /** Throws ConfigError naming the setting when SANDGATE_MODELS and its companions disagree. */
  constructor(
    private readonly config: Config,
    private readonly keys?: KeyLookup,
  ) {
    const errors: string[] = [];
    const names: Record<string, ProviderId> = { anthropic: 'anthropic', openai: 'openai', gemini: 'gemini' };
    if (config.compatibleName in names) errors.push(`SANDGATE_COMPATIBLE_NAME=${config.compatibleName} is the name of another provider: choose another (e.g. ollama).`);
    else names[config.compatibleName] = 'compatible';
    const entries = config.models
      .split(',')
      .map((m) => m.trim())
      .filter(Boolean);
    this.explicit = entries.length > 0;
    const all: ModelChoice[] = [];
    for (const entry of entries) {
      const at = entry.indexOf(':');
      const prefix = at > 0 ? entry.slice(0, at) : '';
      const model = at > 0 ? entry.slice(at + 1) : '';
      const provider = names[prefix];
      if (!provider || !model || /\s/.test(model)) {
        errors.push(`SANDGATE_MODELS has "${entry}", which is not <provider>:<model> with a provider of ${Object.keys(names).join(', ')}.`);
        continue;
      }
      if (provider === 'compatible' && !config.compatibleBaseUrl) errors.push(`SANDGATE_MODELS offers ${entry} but SANDGATE_COMPATIBLE_BASE_URL is empty: set it to the server's URL (e.g. http://localhost:11434/v1).`);
      if (!all.some((c) => c.id === entry)) all.push({ id: entry, provider, model });
    }
    if (!this.explicit) {
      for (const [provider, model] of Object.entries(DEFAULT_MODELS) as [Exclude<ProviderId, 'compatible'>, string][]) all.push({ id: `${provider}:${model}`, provider, model });
    }
    if (config.compatibleBaseUrl && !all.some((c) => c.provider === 'compatible')) {
      errors.push(`SANDGATE_COMPATIBLE_BASE_URL is set but SANDGATE_MODELS lists none of its models: add them as ${config.compatibleName}:<model> (e.g. ${config.compatibleName}:qwen2.5).`);
    }
    if (config.defaultModel && !all.some((c) => c.id === config.defaultModel)) {
      errors.push(`SANDGATE_DEFAULT_MODEL=${config.defaultModel} is not one of the models offered (${all.map((c) => c.id).join(', ') || 'none'}).`);
    }
    if (errors.length) throw new ConfigError(`invalid model settings:\n  - ${errors.join('\n  - ')}`);
    this.all = all;
  }

  private teamKey(p: ProviderId): string {
    const c = this.config;
    return { anthropic: c.anthropicApiKey, openai: c.openaiApiKey, gemini: c.geminiApiKey, compatible: c.compatibleApiKey }[p];
  }

  /** Whether `userId` can use models of `p`: a key of theirs or the team's (a compatible server needs none). */
  async reachable(p: ProviderId, userId: number): Promise<boolean> {
    if (p === 'compatible') return !!this.config.compatibleBaseUrl;
    return !!this.teamKey(p) || ((await this.keys?.has(userId, p)) ?? false);
  }

  /** The models every user can use: those the team's keys (or a compatible server) reach. */
  teamModels(): ModelChoice[] {
    return this.all.filter((c) => (c.provider === 'compatible' ? !!this.config.compatibleBaseUrl : !!this.teamKey(c.provider)));
  }

  /** The models `userId` can use now, in the configured order. */
  async availableTo(userId: number): Promise<ModelChoice[]> {
    // Each provider asked once, however many of its models are offered.
    const providers = [...new Set(this.all.map((c) => c.provider))];
    const reached = new Set<ProviderId>();
    await Promise.all(providers.map(async (p) => (await this.reachable(p, userId)) && reached.add(p)));
    return this.all.filter((c) => reached.has(c.provider));
  }

  /** The model a new conversation of `userId` starts with, if any is available. */
  async defaultFor(userId: number): Promise<ModelChoice | undefined> {
    const available = await this.availableTo(userId);
    return available.find((c) => c.id === this.config.defaultModel) ?? available[0];
  }

  find(id: string): ModelChoice | undefined {
    return this.all.find((c) => c.id === id);
  }

  /** The base URL requests for `p` go to, for messages. */
  baseUrl(p: ProviderId): string {
    const c = this.config;
    return (
      { anthropic: c.anthropicBaseUrl, openai: c.openaiBaseUrl, gemini: c.geminiBaseUrl, compatible: c.compatibleBaseUrl }[p] ||
      { anthropic: 'https://api.anthropic.com/v1', openai: 'https://api.openai.com/v1', gemini: 'https://generativelanguage.googleapis.com/v1beta', compatible: '' }[p]
    );
  }

  /**
   * The language model for `choice` as `userId` uses it: with their own key when they
   * added one, else the team's. Undefined when no key reaches the provider.
   */
  async languageModel(choice: ModelChoice, userId: number): Promise<{ model: LanguageModel; keyOwner: 'user' | 'team' } | undefined> {
    const own = await this.keys?.get(userId, choice.provider);
    const apiKey = own ?? this.teamKey(choice.provider);
    if (!apiKey && choice.provider !== 'compatible') return undefined;
    if (choice.provider === 'compatible' && !this.config.compatibleBaseUrl) return undefined;
    // A provider instance per key: the key never leaves the instance made for it.
    const cacheKey = `${choice.id}\0${apiKey}`;
    let model = this.cache.get(cacheKey);
    if (!model) {
      model = this.build(choice, apiKey);
      if (this.cache.size > 1000) this.cache.clear();
      this.cache.set(cacheKey, model);
    }
    return { model, keyOwner: own ? 'user' : 'team' };
  }

  /** The provider's model, what it hands the AI SDK bounded first (model-bounds.ts). */
  private build(choice: ModelChoice, apiKey: string): LanguageModel {
    return wrapLanguageModel({ model: this.providerModel(choice, apiKey), middleware: boundedModel });
  }

  private providerModel(choice: ModelChoice, apiKey: string) {
    const c = this.config;
    switch (choice.provider) {
      case 'anthropic':
        return createAnthropic({ apiKey, baseURL: c.anthropicBaseUrl || undefined, fetch: yieldingFetch })(choice.model);
      case 'openai':
        // Chat completions: the API every OpenAI-compatible proxy speaks too.
        return createOpenAI({ apiKey, baseURL: c.openaiBaseUrl || undefined, fetch: yieldingFetch }).chat(choice.model);
      case 'gemini':
        return createGoogleGenerativeAI({ apiKey, baseURL: c.geminiBaseUrl || undefined, fetch: yieldingFetch })(choice.model);
      case 'compatible':
        return createOpenAICompatible({ name: c.compatibleName, baseURL: c.compatibleBaseUrl, apiKey: apiKey || undefined, includeUsage: true, fetch: yieldingFetch })(choice.model);
    }
  }
}
