import { expect, test } from 'vitest';
import { runDemo } from '../src/demo/run-demo.js';
import { mysqlServerUrl, redisUrl } from './support/services.js';

test('the demo runs a mixed workload over replicas, survives ' +
  'a SIGKILLed replica, and finds no broken promise', async () => {
  const lines: string[] = [];
  // As a user runs it: LANEWAKE_DATABASE_URL names the server (and a database the demo does not use).
  // The replicas must still work on the demo's own fresh database.
  const before = process.env.LANEWAKE_DATABASE_URL;
  process.env.LANEWAKE_DATABASE_URL = `${mysqlServerUrl().replace(/\/+$/, '')}/lanewake_no_such_database`;
  const s = await runDemo({
    serverUrl: mysqlServerUrl(),
    redisUrl: redisUrl(),
    items: 800,
    lanes: 40,
    replicas: 2,
    keep: false,
    progress: false,
    out: (l) => lines.push(l),
  }).finally(() => {
    if (before === undefined) delete process.env.LANEWAKE_DATABASE_URL;
    else process.env.LANEWAKE_DATABASE_URL = before;
  });
  expect(lines.some((l) => /SIGKILLed replica-2/.test(l))).toBe(true);
  expect(s.completed + s.dead).toBe(800);
  // The mix is deterministic: 8 doomed items end dead; 48 flaky ones fail their first attempt and 4 slow
  // ones overrun theirs — unless that first attempt was on the killed replica, whose expired lease then
  // spent it (a lease reclaim instead of a retry or release).
  expect(s.dead).toBe(8);
  expect(s.retries + s.leaseReclaims).toBeGreaterThanOrEqual(48);
  expect(s.releases + s.leaseReclaims).toBeGreaterThanOrEqual(4);
  expect(s.retries).toBeGreaterThan(0);
  expect(s.releases).toBeGreaterThan(0);
  expect(s.laneOrderViolations).toBe(0);
  expect(s.duplicateEffects).toBe(0);
  expect(s.missingEffects).toBe(0);
}, 600_000);
