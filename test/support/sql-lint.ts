/**
 * The shared SQL subset: what TiDB, MySQL 8 and MariaDB 10.11 all run the
 * same way. Every statement the suite sends is recorded (sql-recorder.ts) and
 * checked against these rules when the run ends (global-setup.ts), so a
 * statement only one server accepts cannot land unnoticed.
 */
export interface SqlRule {
  name: string;
  why: string;
  test: (sql: string) => boolean;
}

const re = (pattern: RegExp) => (sql: string) => pattern.test(sql);

/** True when some `IN (SELECT …)` subquery has a LIMIT of its own (MySQL and TiDB refuse it). */
function limitInInSubquery(sql: string): boolean {
  const opener = /\bIN\s*\(\s*SELECT\b/gi;
  for (let m = opener.exec(sql); m !== null; m = opener.exec(sql)) {
    let depth = 1;
    let i = m.index + m[0].length;
    let body = '';
    for (; i < sql.length && depth > 0; i++) {
      const c = sql[i]!;
      if (c === '(') depth++;
      else if (c === ')') depth--;
      if (depth === 1) body += c;
      else if (depth > 1) body += ' ';
    }
    if (/\bLIMIT\b/i.test(body)) return true;
  }
  return false;
}

export const SQL_RULES: readonly SqlRule[] = [
  {
    name: 'RETURNING',
    why: 'MariaDB only (INSERT/DELETE … RETURNING): MySQL and TiDB have none',
    test: re(/\bRETURNING\b/i),
  },
  { name: 'SKIP LOCKED', why: 'TiDB does not support SKIP LOCKED', test: re(/\bSKIP\s+LOCKED\b/i) },
  {
    name: 'LIMIT in IN (subquery)',
    why: "MySQL and TiDB refuse LIMIT inside IN (SELECT …) ('This version doesn't yet support')",
    test: limitInInSubquery,
  },
  {
    name: 'VALUES() in ON DUPLICATE KEY UPDATE',
    why:
      'deprecated since MySQL 8.0.20 (a warning on every statement); ' +
      'refer to the inserted row through a derived table instead',
    test: re(/\bON\s+DUPLICATE\s+KEY\s+UPDATE\b[^;]*\bVALUES\s*\(/i),
  },
  {
    name: 'CREATE OR REPLACE',
    why: 'MariaDB only',
    test: re(/\bCREATE\s+OR\s+REPLACE\s+(TABLE|INDEX|SEQUENCE|DATABASE|USER)\b/i),
  },
  {
    name: 'IF [NOT] EXISTS on columns or indexes',
    why: 'MariaDB only (ADD COLUMN IF NOT EXISTS, DROP INDEX IF EXISTS, CREATE INDEX IF NOT EXISTS)',
    test: (sql) =>
      /\b(ADD|DROP|MODIFY|CHANGE)\s+(COLUMN|INDEX|KEY|CONSTRAINT)\s+IF\s+(NOT\s+)?EXISTS\b/i.test(sql) ||
      /\bCREATE\s+(UNIQUE\s+)?INDEX\s+IF\s+NOT\s+EXISTS\b/i.test(sql),
  },
  {
    name: 'sequences',
    why: 'MariaDB only',
    test: re(/\b(NEXTVAL|LASTVAL|SETVAL)\s*\(|\bNEXT\s+VALUE\s+FOR\b|\bCREATE\s+SEQUENCE\b/i),
  },
  {
    name: 'MariaDB-only JSON functions',
    why: 'MariaDB only',
    test: re(/\bJSON_(DETAILED|LOOSE|COMPACT|EXISTS|QUERY|NORMALIZE|EQUALS)\s*\(/i),
  },
  { name: 'lock WAIT n', why: 'MariaDB only (FOR UPDATE WAIT n)', test: re(/\bFOR\s+UPDATE\s+WAIT\s+\d/i) },
  { name: 'LIMIT ROWS EXAMINED', why: 'MariaDB only', test: re(/\bROWS\s+EXAMINED\b/i) },
  {
    name: 'MariaDB-only aggregates',
    why: 'MariaDB only',
    test: re(/\b(MEDIAN|PERCENTILE_CONT|PERCENTILE_DISC)\s*\(/i),
  },
  { name: 'Aria storage engine', why: 'MariaDB only', test: re(/\bENGINE\s*=\s*Aria\b/i) },
  {
    name: 'user variables assigned in expressions',
    why: 'deprecated in MySQL 8 (:= outside SET)',
    test: re(/^\s*(SELECT|UPDATE|INSERT|DELETE)\b[\s\S]*:=/i),
  },
];

/** Literals out, whitespace folded: statements that differ only in their values count once. */
export function normalizeSql(sql: string): string {
  return sql
    .replace(/'(?:[^'\\]|\\.|'')*'/g, "'?'")
    .replace(/(?<![(\w.])\d+(\.\d+)?\b/g, '0')
    .replace(/\s+/g, ' ')
    .trim();
}

export interface SqlViolation {
  rule: string;
  why: string;
  statement: string;
}

export function lintSql(statements: Iterable<string>): SqlViolation[] {
  const found: SqlViolation[] = [];
  for (const statement of statements) {
    // Comments TiDB executes (/*T! … */) stay: they are part of what TiDB runs.
    const text = statement.replace(/\/\*(?!T!)[\s\S]*?\*\//g, ' ');
    for (const rule of SQL_RULES) if (rule.test(text)) found.push({ rule: rule.name, why: rule.why, statement });
  }
  return found;
}
