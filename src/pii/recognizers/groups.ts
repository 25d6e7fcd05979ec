/**
 * Digit-group runs, shared by the card and phone recognizers. A candidate like
 * `2 4111 1111 1111 1111 20` is split into its groups and every contiguous run of
 * groups is tried, longest first from each start, so a value is found even with
 * numbers glued on either side; a group (one unbroken digit run) is never split.
 */

export interface Group {
  /** Offsets in the candidate. */
  start: number;
  end: number;
  digits: number;
}

const GROUP = /\+?\(?\d+\)?/g;

export function splitGroups(candidate: string): Group[] {
  const groups: Group[] = [];
  GROUP.lastIndex = 0;
  for (let g = GROUP.exec(candidate); g; g = GROUP.exec(candidate)) {
    groups.push({ start: g.index, end: g.index + g[0].length, digits: g[0].replace(/\D/g, '').length });
  }
  return groups;
}

/**
 * Accepted runs as [firstGroup, lastGroup] pairs, non-overlapping, in order.
 * `canStart(i)` says whether a value may begin at group i (say, not right after a dash).
 */
export function acceptRuns(
  groups: readonly Group[],
  accept: (first: number, last: number) => boolean,
  canStart: (first: number) => boolean = () => true,
): Array<[number, number]> {
  const runs: Array<[number, number]> = [];
  let first = 0;
  while (first < groups.length) {
    let found = -1;
    if (canStart(first)) {
      for (let last = groups.length - 1; last >= first; last--) {
        if (accept(first, last)) {
          found = last;
          break;
        }
      }
    }
    if (found >= 0) {
      runs.push([first, found]);
      first = found + 1;
    } else {
      first++;
    }
  }
  return runs;
}
