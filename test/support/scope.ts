import { afterEach } from 'vitest';
import type { LedgerConfigInput } from '../../src/ledger/config.js';
import { createTestWake, type TestWake } from './engine.js';
import { createTestLedger, type TestLedger } from './ledger.js';

/** What one test made, torn down after it by the afterEach that testScope() registers. */
export interface TestScope {
  /** A ledger of the test's own (a fresh database), dropped after the test. */
  ledger(config?: Partial<LedgerConfigInput>): Promise<TestLedger>;
  /** A wake channel on a key prefix of the test's own, its keys deleted after the test. */
  wake(url?: string): TestWake;
  /** A step run after the test, before the wakes and ledgers go (steps in reverse order, a failing one skipped). */
  cleanup(step: () => Promise<unknown>): void;
  /**
   * Starts a consumer (or anything with start and stop), stopped after the test. A consumer's
   * `counters.errors` must then be 0 (a claim path that kept failing would otherwise pass as
   * merely slow), unless the test injects faults on purpose and says so with `faults: true`.
   */
  start(c: Startable, opts?: { faults?: boolean }): Promise<void>;
}

interface Startable {
  start(): Promise<void>;
  stop(opts?: { drainTimeoutMs?: number }): Promise<unknown>;
  counters?: { errors: number };
}

/** Call once at a test file's top level. */
export function testScope(): TestScope {
  let steps: (() => Promise<unknown>)[] = [];
  let wakes: TestWake[] = [];
  let ledgers: TestLedger[] = [];
  let watched: Startable[] = [];
  afterEach(async () => {
    for (const step of steps.reverse()) await step().catch(() => undefined);
    const erred = watched.flatMap((c, i) =>
      (c.counters?.errors ?? 0) > 0 ? [`consumer ${i}: ${c.counters?.errors} errors`] : [],
    );
    watched = [];
    for (const w of wakes) await w.drop();
    for (const l of ledgers) await l.drop();
    steps = [];
    wakes = [];
    ledgers = [];
    if (erred.length > 0)
      throw new Error(`consumers counted errors (a claim, sweep or hand-back that failed): ${erred.join('; ')}`);
  });
  return {
    ledger: async (config) => {
      const tl = await createTestLedger(config);
      ledgers.push(tl);
      return tl;
    },
    wake: (url) => {
      const tw = createTestWake(url);
      wakes.push(tw);
      return tw;
    },
    cleanup: (step) => void steps.push(step),
    start: async (c, opts) => {
      steps.push(() => c.stop({ drainTimeoutMs: 5_000 }));
      if (opts?.faults !== true) watched.push(c);
      await c.start();
    },
  };
}
