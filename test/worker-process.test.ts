import { spawn, type ChildProcessWithoutNullStreams } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, expect, test } from 'vitest';
import { Producer } from '../src/producer/producer.js';
import { createTestWake, uniqueQueue, type TestWake } from './support/engine.js';
import { createTestLedger, waitFor, type TestLedger } from './support/ledger.js';
import { redisUrl } from './support/services.js';

const cleanups: (() => Promise<unknown>)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c().catch(() => undefined);
});

interface Worker {
  proc: ChildProcessWithoutNullStreams;
  stderr: () => string;
  exit: Promise<number | null>;
}

function startWorker(args: string[], env: Record<string, string>): Worker {
  const proc = spawn(process.execPath, ['--import', 'tsx', 'src/cli/main.ts', 'worker', ...args], {
    env: { ...process.env, LANEWAKE_LOG_LEVEL: 'warn', ...env },
  });
  let stderr = '';
  proc.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
  proc.stdout.on('data', () => undefined);
  const exit = new Promise<number | null>((resolve) => proc.on('exit', (code) => resolve(code)));
  cleanups.push(async () => {
    if (proc.exitCode === null) proc.kill('SIGKILL');
    await exit;
  });
  return { proc, stderr: () => stderr, exit };
}

async function fixtures(): Promise<{ tl: TestLedger; tw: TestWake; queue: string }> {
  const tl = await createTestLedger();
  const tw = createTestWake();
  cleanups.push(
    () => tl.drop(),
    () => tw.drop(),
  );
  return { tl, tw, queue: uniqueQueue('wp') };
}

test('lanewake worker: fed, observable over HTTP, drained by SIGTERM with nothing left processing', async () => {
  const { tl, tw, queue } = await fixtures();
  const w = startWorker(
    [
      '--handlers',
      'test/support/worker-handlers.ts',
      '--queues',
      `${queue}:4`,
      '--admin',
      '127.0.0.1:0',
      '--drain-timeout-ms',
      '10000',
    ],
    {
      LANEWAKE_DATABASE_URL: tl.url,
      LANEWAKE_REDIS_URL: redisUrl(),
      LANEWAKE_REDIS_KEY_PREFIX: tw.keyPrefix,
      LW_TEST_QUEUE: queue,
      LW_TEST_SLOW_MS: '800',
    },
  );
  const admin = await waitFor(() => /admin: (http:\/\/\S+)/.exec(w.stderr())?.[1], 30_000, 'the admin URL');
  const producer = new Producer({ ledger: tl.ledger, wake: tw.wake });
  await producer.enqueueMany(Array.from({ length: 30 }, (_, i) => ({ queue, type: 'fast', payload: { i } })));
  await waitFor(
    async () => ((await tl.ledger.stats(queue))[0]?.counts.completed.count === 30 ? true : undefined),
    20_000,
    'fast items done',
  );

  expect((await fetch(`${admin}/livez`)).status).toBe(200);
  expect((await fetch(`${admin}/readyz`)).status).toBe(200);
  // The ledger shows a completion as soon as it commits; the worker counts it when the reply reaches it.
  const completedMetric = new RegExp(`lanewake_items_completed_total\\{queue="${queue}",type="fast"\\} (\\d+)`);
  const metrics = await waitFor(
    async () => {
      const text = await (await fetch(`${admin}/metrics`)).text();
      return Number(completedMetric.exec(text)?.[1]) >= 30 ? text : undefined;
    },
    10_000,
    'the completed counter to reach 30',
  );
  expect(Number(completedMetric.exec(metrics)?.[1])).toBe(30);
  expect(metrics).toMatch(/lanewake_claim_duration_seconds_count\{queue="[^"]+"\} [1-9]/);
  expect(Number(/lanewake_db_pool_connections\{state="open"\} (\d+)/.exec(metrics)?.[1])).toBeGreaterThan(0);

  const slow = await producer.enqueueMany(Array.from({ length: 3 }, () => ({ queue, type: 'slow', payload: {} })));
  await waitFor(
    async () => ((await tl.ledger.stats(queue))[0]?.counts.processing.count === 3 ? true : undefined),
    20_000,
    'slow items claimed',
  );
  // Claimed is not started: the worker may not have read the claim's reply yet, and a
  // claimed item that has not started is handed back at stop. Wait for the handlers.
  const inFlight = new RegExp(`lanewake_in_flight\\{queue="${queue}"\\} (\\d+)`);
  await waitFor(
    async () => (Number(inFlight.exec(await (await fetch(`${admin}/metrics`)).text())?.[1]) === 3 ? true : undefined),
    10_000,
    'slow items running',
  );
  w.proc.kill('SIGTERM');
  expect(await w.exit).toBe(0);
  for (const s of slow) expect((await tl.ledger.get(s.id))?.state).toBe('completed');
  expect((await tl.ledger.stats(queue))[0]?.counts.processing.count).toBe(0);
});

test('lanewake worker: each bad config value exits 2 naming the field', async () => {
  const { tl, queue } = await fixtures();
  const base = {
    LANEWAKE_DATABASE_URL: tl.url,
    LANEWAKE_HANDLERS: 'test/support/worker-handlers.ts',
    LW_TEST_QUEUE: queue,
  };
  const cases: [string[], Record<string, string>, RegExp][] = [
    [['--queues', `${queue}:0`], {}, /queues\[0\]\.concurrency/],
    [['--queues', 'Bad Queue'], {}, /queues\[0\]\.name/],
    [['--queues', queue, '--admin', '127.0.0.1:99999'], {}, /admin\.port/],
    [['--queues', queue, '--admin', 'nonsense'], {}, /admin: must be host:port, :port, a port, or off/],
    [['--queues', queue], { LANEWAKE_HANDLERS: 'test/support/no-such-module.ts' }, /handlers/],
    [['--queues', 'other-queue'], {}, /handlers\.other-queue/],
    [[], {}, /queues/],
  ];
  // Seven worker processes, started together: each loads the CLI through tsx, which on a loaded
  // two-core machine took over 10 s apiece and failed the test's deadline one after another.
  const workers = cases.map(([args, env]) => startWorker(['--admin', 'off', ...args], { ...base, ...env }));
  const exits = await Promise.all(workers.map((w) => w.exit));
  cases.forEach(([args, , field], i) => {
    expect(exits[i], `${args.join(' ')} → ${workers[i]!.stderr()}`).toBe(2);
    expect(workers[i]!.stderr()).toMatch(field);
  });
}, 120_000);

test(
  'lanewake worker: a newer activation makes the old deployment ' +
    'exit 3 with /readyz 503 while the new one takes the queue',
  async () => {
    const { tl, tw, queue } = await fixtures();
    const dir = mkdtempSync(join(tmpdir(), 'lw-own-'));
    cleanups.push(async () => rmSync(dir, { recursive: true, force: true }));
    const configFor = (deployment: string): string => {
      const path = join(dir, `${deployment}.json`);
      writeFileSync(
        path,
        JSON.stringify({
          handlers: 'test/support/worker-handlers.ts',
          deployment,
          admin: { host: '127.0.0.1', port: 0 },
          ownershipCheckMs: 60_000,
          queues: [{ name: queue, concurrency: 2, ownership: true }],
        }),
      );
      return path;
    };
    const env = {
      LANEWAKE_DATABASE_URL: tl.url,
      LANEWAKE_REDIS_URL: redisUrl(),
      LANEWAKE_REDIS_KEY_PREFIX: tw.keyPrefix,
      LW_TEST_QUEUE: queue,
    };
    await tl.ledger.activate({ queue, deployment: 'blue', expectEpoch: 0 });
    const blue = startWorker(['--config', configFor('blue')], env);
    const green = startWorker(['--config', configFor('green')], env);
    const blueAdmin = await waitFor(() => /admin: (http:\/\/\S+)/.exec(blue.stderr())?.[1], 30_000, 'blue admin URL');
    const greenAdmin = await waitFor(
      () => /admin: (http:\/\/\S+)/.exec(green.stderr())?.[1],
      30_000,
      'green admin URL',
    );
    expect((await fetch(`${blueAdmin}/readyz`)).status).toBe(200);
    expect((await fetch(`${greenAdmin}/readyz`)).status).toBe(503);

    // The CLI moves the queue and broadcasts on the control stream: blue hears it at once (its
    // periodic check is a minute away).
    const { runCli } = await import('../src/cli/program.js');
    const out: string[] = [];
    const io = { out: (t: string) => void out.push(t), err: (t: string) => void out.push(t) };
    const code = await runCli(
      [
        'activate',
        '--queue',
        queue,
        '--deployment',
        'green',
        '--expect-epoch',
        '1',
        '--database-url',
        tl.url,
        '--redis-url',
        redisUrl(),
        '--redis-key-prefix',
        tw.keyPrefix,
      ],
      io,
    );
    expect(code, out.join('')).toBe(0);
    expect(await blue.exit).toBe(3);

    await waitFor(
      async () => ((await fetch(`${greenAdmin}/readyz`)).status === 200 ? true : undefined),
      20_000,
      'green ready',
    );
    const producer = new Producer({ ledger: tl.ledger, wake: tw.wake });
    await producer.enqueueMany(Array.from({ length: 10 }, (_, i) => ({ queue, type: 'fast', payload: { i } })));
    await waitFor(
      async () => ((await tl.ledger.stats(queue))[0]?.counts.completed.count === 10 ? true : undefined),
      20_000,
      'green drains the queue',
    );
    green.proc.kill('SIGTERM');
    expect(await green.exit).toBe(0);
  },
);

test('lanewake worker: a second signal while draining exits ' +
  'at once, 143 after SIGTERM and 130 after SIGINT', async () => {
  const { tl, tw } = await fixtures();
  const producer = new Producer({ ledger: tl.ledger, wake: tw.wake });
  // One worker per signal, each on its own queue, with a handler that outlasts the test: the
  // drain cannot end by itself.
  const runs = (['SIGTERM', 'SIGINT'] as const).map((signal) => {
    const queue = uniqueQueue(`wp-${signal.toLowerCase()}`);
    const w = startWorker(
      [
        '--handlers',
        'test/support/worker-handlers.ts',
        '--queues',
        `${queue}:1`,
        '--admin',
        '127.0.0.1:0',
        '--drain-timeout-ms',
        '600000',
      ],
      {
        LANEWAKE_DATABASE_URL: tl.url,
        LANEWAKE_REDIS_URL: redisUrl(),
        LANEWAKE_REDIS_KEY_PREFIX: tw.keyPrefix,
        LW_TEST_QUEUE: queue,
        LW_TEST_SLOW_MS: '600000',
      },
    );
    return { signal, queue, w };
  });
  await Promise.all(
    runs.map(async ({ signal, queue, w }) => {
      const admin = await waitFor(
        () => /admin: (http:\/\/\S+)/.exec(w.stderr())?.[1],
        60_000,
        `${signal} worker's admin URL`,
      );
      await producer.enqueue({ queue, type: 'slow', payload: {} });
      const inFlight = new RegExp(`lanewake_in_flight\\{queue="${queue}"\\} (\\d+)`);
      await waitFor(
        async () =>
          Number(inFlight.exec(await (await fetch(`${admin}/metrics`)).text())?.[1]) === 1 ? true : undefined,
        30_000,
        `${signal} worker's handler running`,
      );
      w.proc.kill(signal);
      await waitFor(
        () => (w.stderr().includes(`${signal}: draining`) ? true : undefined),
        30_000,
        `${signal} worker draining`,
      );
      w.proc.kill(signal);
    }),
  );
  const [term, int] = await Promise.all(runs.map((r) => r.w.exit));
  expect(term, runs[0]!.w.stderr()).toBe(143);
  expect(int, runs[1]!.w.stderr()).toBe(130);
  for (const r of runs) expect(r.w.stderr()).toContain(`${r.signal} again: exiting now`);
}, 120_000);
