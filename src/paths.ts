/**
 * Where the repository's own files are, for code that reads them at run time: built-in
 * skills (mounted at /skills), the in-sandbox tool library (/tools), page templates,
 * static files, and the small host-side helpers the gateway starts. One module, so a
 * move of any of them is one change.
 */
import path from 'node:path';
import { fileURLToPath } from 'node:url';

/** The repository (or installed package) root. */
export const REPO_ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
/** Built-in skills: <name>/SKILL.md, mounted read-only at /skills. */
export const SKILLS_DIR = path.join(REPO_ROOT, 'skills');
/** The static in-sandbox library (the callMCPTool bridge), copied into each sandbox's /tools. */
export const TOOLS_DIR = path.join(REPO_ROOT, 'tools');
/** Server-rendered page templates, by route. */
export const VIEWS_DIR = path.join(REPO_ROOT, 'views');
/** CSS, icons and vendored client scripts, served at /static. */
export const STATIC_DIR = path.join(REPO_ROOT, 'static');
/** The confined helper through which the gateway reaches a workspace. */
export const WORKSPACE_HELPER = path.join(REPO_ROOT, 'host/workspace_helper.py');
/** The launcher of stdio upstream servers, and what it preloads into Node servers. */
export const UPSTREAM_LAUNCHER = path.join(REPO_ROOT, 'host/upstream_launcher.py');
export const UPSTREAM_PROXY_PRELOAD = path.join(REPO_ROOT, 'src/upstream/proxy-preload.cjs');
