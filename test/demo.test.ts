import { expect, test } from 'vitest';
import { runDemo } from '../src/demo/run-demo.js';
import { mysqlServerUrl, redisUrl } from './support/services.js';

test('the demo runs a mixed workload over replicas, survives a SIGKILLed replica, and finds no broken promise', async () => {
  const lines: string[] = [];
  const s = await runDemo({
    serverUrl: mysqlServerUrl(),
    redisUrl: redisUrl(),
    items: 800,
    lanes: 40,
    replicas: 2,
    keep: false,
    progress: false,
    out: (l) => lines.push(l),
  });
  expect(lines.some((l) => /SIGKILLed replica-2/.test(l))).toBe(true);
  expect(s.completed + s.dead).toBe(800);
  // The mix is deterministic: 1% doomed items end dead, flaky ones retry once, slow ones are released once.
  expect(s.dead).toBe(8);
  expect(s.retries).toBeGreaterThanOrEqual(48);
  expect(s.releases).toBeGreaterThanOrEqual(4);
  expect(s.laneOrderViolations).toBe(0);
  expect(s.duplicateEffects).toBe(0);
  expect(s.missingEffects).toBe(0);
}, 120_000);
