/**
 * Cells of a separated line (CSV, TSV, `;` or `|`), shared by the table tracker
 * (tables.ts) and the name finder's headerless tables; imports nothing, so both can use it.
 */

/** Splits a CSV line, honouring double quotes; undefined when the quoting is broken. */
export function splitCells(line: string, sep: string): Array<{ start: number; end: number }> | undefined {
  const cells: Array<{ start: number; end: number }> = [];
  let i = 0;
  while (i <= line.length) {
    if (line[i] === '"') {
      let j = i + 1;
      while (j < line.length && !(line[j] === '"' && line[j + 1] !== '"')) j += line[j] === '"' ? 2 : 1;
      cells.push({ start: i + 1, end: j });
      i = j + 1;
      if (i < line.length && line[i] !== sep) return undefined;
      i++;
    } else {
      let j = line.indexOf(sep, i);
      if (j < 0) j = line.length;
      cells.push({ start: i, end: j });
      i = j + 1;
    }
  }
  return cells;
}
