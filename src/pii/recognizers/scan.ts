/**
 * Calls `fn` for every match of a global regex. Faster than `String.prototype.matchAll`,
 * which clones the regex on every call; the detector calls recognizers per line and
 * per block, so that clone showed up in profiles. `fn` must not use `re` itself.
 */
export function eachMatch(re: RegExp, text: string, fn: (m: RegExpExecArray) => void): void {
  re.lastIndex = 0;
  for (let m = re.exec(text); m; m = re.exec(text)) {
    if (m[0].length === 0) re.lastIndex++;
    const next = re.lastIndex;
    fn(m);
    re.lastIndex = next;
  }
}
