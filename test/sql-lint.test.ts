import { expect, test } from 'vitest';
import { lintSql, normalizeSql } from './support/sql-lint.js';

const rulesOf = (sql: string) => lintSql([normalizeSql(sql)]).map((v) => v.rule);

test('statements every server shares pass', () => {
  for (const sql of [
    'SELECT id FROM `lw_items` FORCE INDEX (ix_lane) WHERE queue ' +
      "= 'q' AND lane = 'returning' ORDER BY lane_seq LIMIT 1",
    "UPDATE `lw_items` SET state = 'blocked', probe_after = " +
      'LEAST(NOW(6) + INTERVAL 5 SECOND, block_expires_at) WHERE id = ?',
    'INSERT INTO `lw_lanes` (queue, lane, next_seq, active) SELECT * FROM (SELECT ? AS queue, ? AS lane, 1 ' +
      'AS next_seq, 1 AS active) AS v ON DUPLICATE KEY UPDATE next_seq = `lw_lanes`.next_seq + v.next_seq',
    'SELECT id FROM t WHERE id IN (SELECT item_id FROM w WHERE queue = ?) LIMIT 10',
    'CREATE TABLE t (id BIGINT PRIMARY KEY /*T![clustered_index] CLUSTERED */)',
    "SET SESSION sql_mode = TRIM(BOTH ',' FROM @@SESSION.sql_mode)",
  ]) {
    expect(rulesOf(sql), sql).toEqual([]);
  }
});

test('constructs outside the shared subset are named', () => {
  expect(rulesOf('DELETE FROM t WHERE id = 1 RETURNING id')).toEqual(['RETURNING']);
  expect(rulesOf('SELECT id FROM t WHERE state = 0 FOR UPDATE SKIP LOCKED')).toEqual(['SKIP LOCKED']);
  expect(rulesOf('UPDATE t SET a = 1 WHERE id IN (SELECT id FROM t ORDER BY b LIMIT 5)')).toEqual([
    'LIMIT in IN (subquery)',
  ]);
  expect(rulesOf('SELECT * FROM t WHERE id IN (SELECT id FROM (SELECT id FROM t LIMIT 5) AS d)')).toEqual([]);
  expect(rulesOf('INSERT INTO t (a, b) VALUES (1, 2) ON DUPLICATE KEY UPDATE b = VALUES(b)')).toEqual([
    'VALUES() in ON DUPLICATE KEY UPDATE',
  ]);
  expect(
    rulesOf(
      'INSERT INTO t (a) SELECT 1 ON DUPLICATE KEY UPDATE a = 2; ' +
        'INSERT INTO u (b) VALUES (1) ON DUPLICATE KEY UPDATE b = 2',
    ),
  ).toEqual([]);
  expect(rulesOf('ALTER TABLE t ADD COLUMN IF NOT EXISTS c INT')).toEqual(['IF [NOT] EXISTS on columns or indexes']);
  expect(rulesOf('ALTER TABLE t DROP INDEX IF EXISTS ix_a')).toEqual(['IF [NOT] EXISTS on columns or indexes']);
  expect(rulesOf('CREATE OR REPLACE TABLE t (a INT)')).toEqual(['CREATE OR REPLACE']);
  expect(rulesOf('SELECT NEXTVAL(s)')).toEqual(['sequences']);
  expect(rulesOf('SELECT id FROM t WHERE a = 1 FOR UPDATE WAIT 5')).toEqual(['lock WAIT n']);
  expect(rulesOf('SELECT JSON_DETAILED(payload) FROM t')).toEqual(['MariaDB-only JSON functions']);
});

test('literals do not trip a rule, and statements differing only in values normalize alike', () => {
  expect(
    rulesOf('INSERT INTO t (payload) VALUES (\'{"sql": "DELETE ... RETURNING id FOR UPDATE SKIP LOCKED"}\')'),
  ).toEqual([]);
  expect(normalizeSql("SELECT a FROM t WHERE id = 'x1' LIMIT 10")).toBe(
    normalizeSql("SELECT a FROM t WHERE id = 'y''2'   LIMIT 500"),
  );
});
