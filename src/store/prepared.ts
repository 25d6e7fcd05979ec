/**
 * Queries on the hot path, built and compiled once. Kysely builds every query anew each
 * time it runs: immutable operation nodes, one per column and alias, then compiled to
 * SQL. For the few queries every request makes (the token check reads 22 columns over a
 * join, the audit row writes 14) building took longer than running them on SQLite. A
 * prepared query is built once with placeholders where its values go, compiled once per
 * database, and from then on only run, with the values put in place.
 *
 *     const userById = prepared((db, p: { id: number }) => db.selectFrom('users').selectAll().where('id', '=', p.id));
 *     const rows = await userById(db, { id: 7 });
 *
 * The builder runs once, with placeholders instead of values: it may put each of `p`'s
 * properties where a value goes (a comparison, an inserted column, a limit) and must not
 * look at one (no `if (p.id === null)`, no list for `in`). A property read that does not
 * reach the compiled query as a value is refused when the query is first compiled.
 */
import type { Compilable, CompiledQuery, DialectAdapter } from 'kysely';
import type { Db } from './tables.js';

/** Stands where one value goes while the query is built; never sent to a database. */
class Placeholder {
  constructor(readonly key: string) {}
}

/** A query compiled once per database (each store has its own adapter), run with fresh values. */
export function prepared<P extends Record<string, unknown>, O>(build: (db: Db, p: P) => Compilable<O>): (db: Db, p: P) => Promise<O[]> {
  const compiled = new WeakMap<DialectAdapter, CompiledQuery<O>>();
  const compile = (db: Db): CompiledQuery<O> => {
    const read = new Set<string>();
    const placeholders = new Proxy({} as P, {
      get: (_, key) => {
        if (typeof key !== 'string') throw new Error('a prepared query reads its values by name');
        read.add(key);
        return new Placeholder(key);
      },
    });
    const query = build(db, placeholders).compile();
    const placed = new Set(query.parameters.filter((v): v is Placeholder => v instanceof Placeholder).map((v) => v.key));
    const lost = [...read].filter((key) => !placed.has(key));
    if (lost.length) throw new Error(`a prepared query read ${lost.join(', ')} without placing it as a value: ${query.sql}`);
    return query;
  };
  return async (db, p) => {
    const adapter = db.getExecutor().adapter;
    let query = compiled.get(adapter);
    if (!query) compiled.set(adapter, (query = compile(db)));
    const parameters = query.parameters.map((v) => (v instanceof Placeholder ? p[v.key] : v));
    return (await db.executeQuery<O>({ ...query, parameters })).rows;
  };
}
