import mysql from 'mysql2';

type Listener = (sql: string) => void;
const listeners = new Set<Listener>();
let installed = false;

/**
 * Calls `listener` with the text of every statement this process sends over
 * mysql2 (`query` and `execute`, pool connections included). The driver is
 * observed, not replaced: each call goes on to the real method. The SQL lint
 * (sql-recorder.ts) and the round-trip counter (bench/sql-count.ts) use it.
 */
export function onEveryStatement(listener: Listener): () => void {
  install();
  listeners.add(listener);
  return () => listeners.delete(listener);
}

function install(): void {
  if (installed) return;
  installed = true;
  type QueryFn = (this: unknown, sql: unknown, ...rest: unknown[]) => unknown;
  const base = Object.getPrototypeOf(mysql.Connection.prototype) as { query: QueryFn; execute: QueryFn };
  for (const method of ['query', 'execute'] as const) {
    const original = base[method];
    base[method] = function (this: unknown, sql: unknown, ...rest: unknown[]) {
      const text =
        typeof sql === 'string'
          ? sql
          : typeof sql === 'object' && sql !== null && 'sql' in sql
            ? String((sql as { sql: unknown }).sql)
            : undefined;
      if (text !== undefined) for (const l of listeners) l(text);
      return original.call(this, sql, ...rest);
    };
  }
}
