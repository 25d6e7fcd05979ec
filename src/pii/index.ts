/**
 * The PII layer: tokenize what goes to a model, detokenize what comes from one.
 *
 *   const vault = new PiiVault(db, loadOrCreateKey(dataDir), { ttlMs: ttlMs(s), detector: createDetector(detectorOptions(s)) });
 *   const scope = await vault.scope({ userId, kind: 'token', id: apiTokenId });
 *   (await scope.tokenize(toolOutput)).text          // to the model, once its new values are stored
 *   await scope.detokenizeDeep(toolArguments)        // from the model, to the sandbox or upstream
 */
export { PII_ENTITY_TYPES, TOKEN_TYPES, type PiiEntityType, type Span, type TokenType } from './entities.js';
export { createDetector, type Detector, type DetectorOptions, type DetectionSession, type Segment } from './detector.js';
export { dropPiiScope } from './scopes.js';
export { formatToken, parseToken } from './token-format.js';
export { PII_KEY_FILE, loadOrCreatePiiKey } from './keys.js';
export { piiBatchesMigration, piiMigration } from './schema.js';
export { preloadWordKnowledge } from './recognizers/word-knowledge.js';
export { DEFAULT_PII_TTL_HOURS, detectorOptions, parsePiiSettings, piiSettingsSchema, ttlMs, type PiiSettings } from './settings.js';
export {
  PiiScope, PiiVault, type DetokenizeResult, type FoundToken, type PiiScopeRef, type PiiTokenStream, type PiiVaultOptions, type TokenizeResult,
} from './vault.js';
