/**
 * The cost of many defined queues (issue 54; docs/operations/scaling.md): one worker (an in-process Supervisor)
 * serving `bench-*` while the ledger defines N queues (`lanewake queue create`'s API), all idle. Measured: how
 * long until it serves every one (the reconciler's passes and N consumers' starts), then over `--idle-s` seconds
 * of idle: claim rounds, SQL round trips (every statement this process sends) and reconcile passes, and the
 * worker's Redis connections by name (CLIENT LIST, this process's sockets). The wake channel and ledger pool are
 * the worker's own. `--queues 10000 --idle-s 30`; writes bench/results/reconcile-latest.json.
 */
import { Socket } from 'node:net';
import { performance } from 'node:perf_hooks';
import { Redis } from 'ioredis';
import { resolveWorkerConfig } from '../../src/supervisor/config-sources.js';
import type { HandlersByQueue } from '../../src/supervisor/handlers-module.js';
import { Supervisor } from '../../src/supervisor/supervisor.js';
import { installRoundTripCounter, setPhase, takePhase } from '../sql-count.js';
import { fmt, median, progress, sleep } from '../support.js';
import { defineWorkload, numFlag, REDIS_URL, silent, waitUntil, withFreshLedger } from '../workload.js';

const QUEUES = numFlag('--queues', 10_000);
const IDLE_S = numFlag('--idle-s', 30);
const RECONCILE_MS = 1_000;

interface Result {
  /** Seconds from the last queue's definition until every one has a running consumer. */
  servedS: number;
  reconcilePasses: number;
  claimRounds: number;
  sqlRoundTrips: number;
  /** Statements in those round trips (the ledger's pool sends several in one). */
  sqlStatements: number;
  /** The worker's Redis connections by name, instance part cut (`lanewake:wake:<host:pid:id>` as `lanewake:wake`). */
  redis: Record<string, number>;
}

/** This process's connections to Redis, by name. */
async function redisConnections(): Promise<Record<string, number>> {
  const port = Number(new URL(REDIS_URL).port || 6379);
  const handles = (process as unknown as { _getActiveHandles: () => unknown[] })._getActiveHandles();
  const mine = new Set(
    handles.filter((h): h is Socket => h instanceof Socket && h.remotePort === port).map((h) => h.localPort),
  );
  const admin = new Redis(REDIS_URL, { maxRetriesPerRequest: 1 });
  try {
    const out: Record<string, number> = {};
    for (const line of ((await admin.client('LIST')) as string).split('\n')) {
      const addrPort = Number(/ addr=\S*:(\d+) /.exec(` ${line} `)?.[1]);
      const name = /name=(\S*)/.exec(line)?.[1] ?? '';
      if (!mine.has(addrPort) || !name.startsWith('lanewake')) continue;
      const kind = name.split(':').slice(0, 2).join(':');
      out[kind] = (out[kind] ?? 0) + 1;
    }
    return out;
  } finally {
    admin.disconnect();
  }
}

const measure = (queues: number): Promise<Result> =>
  withFreshLedger('lwr', async ({ ledger, wake }) => {
    for (let i = 0; i < queues; i++) await ledger.createQueue(`bench-${i}`);
    // The env's channel is not the worker's: closed, so only the worker's connections are counted.
    await wake.close();
    let passes = 0;
    const config = resolveWorkerConfig([
      {
        databaseUrl: ledger.config.url,
        redisUrl: REDIS_URL,
        redisKeyPrefix: wake.keyPrefix,
        handlers: 'inline',
        admin: false,
        reconcileIntervalMs: RECONCILE_MS,
        poolSize: 4,
        queues: [{ name: 'bench-*', concurrency: 8 }],
      },
    ]);
    const handlers = { 'bench-*': { ping: async () => undefined } } as unknown as HandlersByQueue;
    const sup = new Supervisor({
      config,
      handlers,
      logger: silent,
      afterReconcile: async () => void passes++,
    });
    const from = performance.now();
    await sup.start();
    try {
      const running = () => [...sup.runners.values()].filter((rs) => rs.every((r) => r.state === 'running')).length;
      await waitUntil(() => running() >= queues, 600_000, 'every queue served');
      const servedS = (performance.now() - from) / 1000;
      const consumers = () => [...sup.runners.values()].flat().flatMap((r) => r.current ?? []);
      // Settled: past every consumer's first sweep (its rounds may end after its count) and a shared one.
      await waitUntil(() => consumers().every((c) => c.counters.sweeps >= 2), 600_000, 'a shared sweep');
      const rounds = () => consumers().reduce((n, c) => n + c.counters.claimRounds, 0);
      progress(`  ${queues} queue(s) served in ${fmt(servedS, 1)} s; idle ${IDLE_S} s`);
      const rounds0 = rounds();
      const passes0 = passes;
      installRoundTripCounter();
      setPhase('idle');
      await sleep(IDLE_S * 1000);
      setPhase('after');
      const idle = takePhase('idle');
      return {
        sqlStatements: idle.statements,
        servedS,
        reconcilePasses: passes - passes0,
        claimRounds: rounds() - rounds0,
        sqlRoundTrips: idle.roundTrips,
        redis: await redisConnections(),
      };
    } finally {
      await sup.stop();
    }
  });

export default defineWorkload<number, Result>({
  about: 'one worker serving a pattern over 10 and N defined idle queues: reconcile cost (Many queues)',
  variants: [10, QUEUES],
  label: (q) => `${q} queue(s)`,
  runs: 1,
  save: true,
  measure,
  line: (_, r) =>
    `served in ${fmt(r.servedS, 1)} s; idle: ${r.claimRounds} claim rounds, ${r.sqlRoundTrips} SQL round trips, ` +
    `${r.reconcilePasses} passes; Redis ${JSON.stringify(r.redis)}; statements ${r.sqlStatements}`,
  report: (of, runs) => [
    {
      title: `one worker, N idle queues by pattern — median of ${runs} run(s); idle ${IDLE_S} s`,
      headers: ['queues', 'served in s', 'claim rounds / s', 'SQL round trips / s', 'per pass', 'Redis conns'],
      rows: [10, QUEUES].map((q) => {
        const rs = of(q);
        const m = (f: (r: Result) => number, digits: number) => fmt(median(rs.map(f)), digits);
        return [
          String(q),
          m((r) => r.servedS, 1),
          m((r) => r.claimRounds / IDLE_S, 2),
          m((r) => r.sqlRoundTrips / IDLE_S, 1),
          m((r) => r.sqlRoundTrips / Math.max(1, r.reconcilePasses), 1),
          m((r) => Object.values(r.redis).reduce((a, b) => a + b, 0), 0),
        ];
      }),
      align: Array(6).fill('right'),
    },
  ],
});
