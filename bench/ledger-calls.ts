/**
 * What each ledger call of the one-job path takes on a server, on its own:
 * enqueue, claim by id and completion, one job at a time, laneless and laned
 * (bench/latency.ts runs it on each server's own port, so the figures are the
 * server's work plus one loopback round trip per round trip of the call).
 */
import { performance } from 'node:perf_hooks';
import type { ClaimedItem } from '../src/ledger/types.js';
import { environment } from './engine.js';
import { median } from './support.js';

export interface CallTimes {
  /** Median ms per call over `jobs` jobs (the first tenth left out: pools connect, plans warm). */
  enqueue: number;
  claimById: number;
  complete: number;
  enqueueLaned: number;
  completeLaned: number;
}

export async function ledgerCallTimes(serverUrl: string, jobs: number): Promise<CallTimes> {
  const env = await environment(false, serverUrl);
  try {
    const ledger = env.ledger;
    const times: Record<keyof CallTimes, number[]> = {
      enqueue: [],
      claimById: [],
      complete: [],
      enqueueLaned: [],
      completeLaned: [],
    };
    const timed = async <T>(key: keyof CallTimes, fn: () => Promise<T>): Promise<T> => {
      const t0 = performance.now();
      const value = await fn();
      times[key].push(performance.now() - t0);
      return value;
    };
    const claim = async (id: string): Promise<ClaimedItem> => {
      const [item] = await ledger.claimByIds({ queue: env.queue, owner: 'bench', leaseMs: 30_000, ids: [id] });
      if (!item) throw new Error(`claim of ${id} won nothing`);
      return item;
    };
    for (let i = 0; i < jobs; i++) {
      const plain = await timed('enqueue', () => ledger.enqueue({ queue: env.queue, type: 'noop', payload: { n: i } }));
      const item = await timed('claimById', () => claim(plain.id));
      await timed('complete', () => ledger.completeMany([{ handle: item }]));
      const laned = await timed('enqueueLaned', () =>
        ledger.enqueue({ queue: env.queue, type: 'noop', lane: 'l0', payload: { n: i } }),
      );
      const head = await claim(laned.id);
      await timed('completeLaned', () => ledger.completeMany([{ handle: head }]));
    }
    const skip = Math.ceil(jobs / 10);
    const m = (key: keyof CallTimes): number => median(times[key].slice(skip));
    return {
      enqueue: m('enqueue'),
      claimById: m('claimById'),
      complete: m('complete'),
      enqueueLaned: m('enqueueLaned'),
      completeLaned: m('completeLaned'),
    };
  } finally {
    await env.close();
  }
}
