/**
 * Formatted previews already made, so opening the same file again formats nothing: keyed
 * by the user and the file's path, modification time and size (a file rewritten within
 * the same millisecond at the same size shows its earlier preview until it changes
 * again). At most PREVIEW_CACHE_CHARS characters of HTML are kept, the least recently
 * shown dropped first.
 */

/** Characters of preview HTML kept in all. */
export const PREVIEW_CACHE_CHARS = 16 * 1024 * 1024;

export interface PreviewKey {
  userId: number;
  path: string;
  mtimeMs: number;
  size: number;
}

export class PreviewCache {
  private readonly entries = new Map<string, string>();
  private chars = 0;

  constructor(private readonly maxChars = PREVIEW_CACHE_CHARS) {}

  private static key(k: PreviewKey): string {
    return JSON.stringify([k.userId, k.path, k.mtimeMs, k.size]);
  }

  get(k: PreviewKey): string | undefined {
    const key = PreviewCache.key(k);
    const html = this.entries.get(key);
    if (html === undefined) return undefined;
    // Shown again: the most recent now.
    this.entries.delete(key);
    this.entries.set(key, html);
    return html;
  }

  set(k: PreviewKey, html: string): void {
    if (html.length > this.maxChars) return;
    const key = PreviewCache.key(k);
    const old = this.entries.get(key);
    if (old !== undefined) {
      this.entries.delete(key);
      this.chars -= old.length;
    }
    this.entries.set(key, html);
    this.chars += html.length;
    for (const [oldest, h] of this.entries) {
      if (this.chars <= this.maxChars) break;
      this.entries.delete(oldest);
      this.chars -= h.length;
    }
  }
}
