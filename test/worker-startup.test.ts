import { spawn, type ChildProcessWithoutNullStreams } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { connect, createServer, type Server } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, expect, test } from 'vitest';
import { Producer } from '../src/producer/producer.js';
import { createTestWake, uniqueQueue, type TestWake } from './support/engine.js';
import { mustGet } from './support/items.js';
import { createTestLedger, waitFor, type TestLedger } from './support/ledger.js';
import { freePort } from './support/processes.js';
import { redisUrl } from './support/services.js';

const cleanups: (() => Promise<unknown>)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c().catch(() => undefined);
});

interface Worker {
  proc: ChildProcessWithoutNullStreams;
  stdout: () => string;
  stderr: () => string;
  exit: Promise<number | null>;
}

/** `lanewake worker …` as a process; LANEWAKE_LOG_LEVEL is left unset unless `env` sets it. */
function worker(args: string[], env: Record<string, string>): Worker {
  const inherited = { ...process.env };
  delete inherited.LANEWAKE_LOG_LEVEL;
  for (const name of Object.keys(inherited))
    if (name.startsWith('LANEWAKE_') && !name.startsWith('LANEWAKE_TEST_')) delete inherited[name];
  const proc = spawn(process.execPath, ['--import', 'tsx', 'src/cli/main.ts', 'worker', ...args], {
    env: { ...inherited, ...env },
  });
  let stdout = '';
  let stderr = '';
  proc.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
  proc.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
  const exit = new Promise<number | null>((resolve) => proc.on('exit', (code) => resolve(code)));
  cleanups.push(async () => {
    if (proc.exitCode === null) proc.kill('SIGKILL');
    await exit;
  });
  return { proc, stdout: () => stdout, stderr: () => stderr, exit };
}

async function fixtures(): Promise<{ tl: TestLedger; tw: TestWake; dir: string }> {
  const tl = await createTestLedger();
  const tw = createTestWake();
  const dir = mkdtempSync(join(tmpdir(), 'lw-start-'));
  cleanups.push(
    () => tl.drop(),
    () => tw.drop(),
    async () => rmSync(dir, { recursive: true, force: true }),
  );
  return { tl, tw, dir };
}

/** A handler module answering every given queue with a `job` type. */
function handlerModule(dir: string, queues: string[]): string {
  const path = join(dir, 'handlers.mjs');
  writeFileSync(
    path,
    `export const handlers = { ` +
      `${queues.map((q) => `${JSON.stringify(q)}: { job: async () => ({ ok: true }) }`).join(', ')} };\n`,
  );
  return path;
}

function logLines(stderr: string): { msg?: string; level?: number }[] {
  return stderr
    .split('\n')
    .filter((l) => l.startsWith('{'))
    .map((l) => JSON.parse(l) as { msg?: string; level?: number });
}

test('a file queue with ownership stays fenced under --queues q:4, and --print-config shows what is kept', async () => {
  const { tl, tw, dir } = await fixtures();
  const [fenced, open] = [uniqueQueue('fenced'), uniqueQueue('open')];
  const configPath = join(dir, 'worker.json');
  writeFileSync(
    configPath,
    JSON.stringify({
      handlers: handlerModule(dir, [fenced, open]),
      deployment: 'blue',
      // The periodic check backs up the control-stream broadcast the test sends on activation.
      ownershipCheckMs: 1_000,
      reconcileIntervalMs: 500,
      queues: [{ name: fenced, concurrency: 1, ownership: true, leaseMs: 9_000, maxProcessing: 7 }],
    }),
  );
  const env = {
    LANEWAKE_DATABASE_URL: tl.url,
    LANEWAKE_REDIS_URL: redisUrl(),
    LANEWAKE_REDIS_KEY_PREFIX: tw.keyPrefix,
  };

  const printed = worker(['--config', configPath, '--queues', `${fenced}:4,${open}:1`, '--print-config'], env);
  expect(await printed.exit, printed.stderr()).toBe(0);
  const shown = JSON.parse(printed.stdout()) as {
    queues: Record<string, unknown>[];
    redisKeyPrefix: string;
    settingSources: Record<string, Record<string, string>>;
  };
  expect(shown.queues).toEqual([
    { name: fenced, concurrency: 4, ownership: true, leaseMs: 9_000, maxProcessing: 7 },
    { name: open, concurrency: 1, ownership: false },
  ]);
  expect(shown.redisKeyPrefix).toBe(tw.keyPrefix);
  // Where each value the ledger could also give comes from: pinned by a layer, or the ledger's, read live.
  expect(shown.settingSources[fenced]).toMatchObject({
    concurrency: 'pinned by flags',
    maxProcessing: 'pinned by file',
  });
  expect(shown.settingSources[open]?.maxProcessing).toMatch(/^the ledger .*read live/);

  const producer = new Producer({ ledger: tl.ledger, wake: tw.wake });
  const held = await producer.enqueue({ queue: fenced, type: 'job', payload: {} });
  const free = await producer.enqueue({ queue: open, type: 'job', payload: {} });
  const w = worker(['--config', configPath, '--queues', `${fenced}:4,${open}:1`, '--admin', '127.0.0.1:0'], {
    ...env,
    LANEWAKE_LOG_LEVEL: 'warn',
  });
  const admin = await waitFor(() => /admin: (http:\/\/\S+)/.exec(w.stderr())?.[1], 30_000, 'the admin URL');
  // The worker runs: the unfenced queue's item completes. The fenced queue was never activated:
  // nothing is claimed there.
  await waitFor(
    async () => ((await tl.ledger.get(free.id))?.state === 'completed' ? true : undefined),
    30_000,
    'the open queue to run',
  );
  const ready = (await (await fetch(`${admin}/readyz`)).json()) as {
    ready: boolean;
    checks: Record<string, { ok: boolean; detail?: string }>;
  };
  expect(ready.ready).toBe(false);
  expect(ready.checks[`ownership:${fenced}`]).toEqual({ ok: false, detail: 'standby' });
  expect((await mustGet(tl.ledger, held.id)).state).toBe('pending');
  expect((await mustGet(tl.ledger, held.id)).attempt).toBe(0);

  // Activated for this deployment, the queue runs under its epoch.
  await tl.ledger.activate({ queue: fenced, deployment: 'blue', expectEpoch: 0 });
  await tw.wake.publishControl(fenced, { type: 'ownership', epoch: 1, deployment: 'blue' });
  await waitFor(
    async () => ((await tl.ledger.get(held.id))?.state === 'completed' ? true : undefined),
    30_000,
    'the fenced queue to run once activated',
  );
  w.proc.kill('SIGTERM');
  expect(await w.exit).toBe(0);
});

test('an admin address in use exits 2 before any consumer starts, naming --admin and LANEWAKE_ADMIN', async () => {
  const { tl, tw, dir } = await fixtures();
  const queue = uniqueQueue('busy');
  const port = await freePort();
  const squatter: Server = createServer();
  await new Promise<void>((resolve) => squatter.listen(port, '127.0.0.1', resolve));
  cleanups.push(() => new Promise<void>((resolve) => squatter.close(() => resolve())));
  const item = await new Producer({ ledger: tl.ledger, wake: tw.wake }).enqueue({ queue, type: 'job', payload: {} });

  const w = worker(['--handlers', handlerModule(dir, [queue]), '--queues', queue, '--admin', `127.0.0.1:${port}`], {
    LANEWAKE_DATABASE_URL: tl.url,
    LANEWAKE_REDIS_URL: redisUrl(),
    LANEWAKE_REDIS_KEY_PREFIX: tw.keyPrefix,
  });
  expect(await w.exit, w.stderr()).toBe(2);
  expect(w.stderr()).toContain(`127.0.0.1:${port}`);
  expect(w.stderr()).toMatch(/--admin HOST:PORT/);
  expect(w.stderr()).toMatch(/--admin off/);
  expect(w.stderr()).toMatch(/LANEWAKE_ADMIN/);
  expect(logLines(w.stderr()).map((l) => l.msg)).not.toContain('worker started');
  const after = await mustGet(tl.ledger, item.id);
  expect(after.state).toBe('pending');
  expect(after.attempt).toBe(0);
});

test('the worker logs at info by default: "admin server listening" once, then "worker started"', async () => {
  const { tl, tw, dir } = await fixtures();
  const queue = uniqueQueue('logs');
  const w = worker(['--handlers', handlerModule(dir, [queue]), '--queues', queue, '--admin', '127.0.0.1:0'], {
    LANEWAKE_DATABASE_URL: tl.url,
    LANEWAKE_REDIS_URL: redisUrl(),
    LANEWAKE_REDIS_KEY_PREFIX: tw.keyPrefix,
  });
  await waitFor(
    () => (logLines(w.stderr()).some((l) => l.msg === 'worker started') ? true : undefined),
    30_000,
    'worker started at info',
  );
  w.proc.kill('SIGTERM');
  expect(await w.exit).toBe(0);
  const messages = logLines(w.stderr()).map((l) => l.msg);
  expect(messages.filter((m) => m === 'admin server listening')).toHaveLength(1);
  expect(messages.indexOf('admin server listening')).toBeLessThan(messages.indexOf('worker started'));
});

test('start-up errors say what to set: missing handlers and database URL, and the renamed key prefix', async () => {
  const { tl, dir } = await fixtures();
  const queue = uniqueQueue('msg');
  const cases: [string[], Record<string, string>, RegExp[]][] = [
    [['--queues', queue], { LANEWAKE_DATABASE_URL: tl.url }, [/--handlers <module>/, /LANEWAKE_HANDLERS/, /handlers:/]],
    [
      ['--queues', queue, '--handlers', handlerModule(dir, [queue])],
      {},
      [/--database-url <url>/, /LANEWAKE_DATABASE_URL/, /databaseUrl:/],
    ],
    [
      ['--queues', queue, '--handlers', handlerModule(dir, [queue])],
      { LANEWAKE_DATABASE_URL: tl.url, LANEWAKE_KEY_PREFIX: 'old:' },
      [/LANEWAKE_KEY_PREFIX/, /LANEWAKE_REDIS_KEY_PREFIX/],
    ],
  ];
  for (const [args, env, patterns] of cases) {
    const w = worker(['--admin', 'off', ...args], env);
    expect(await w.exit, `${args.join(' ')} → ${w.stderr()}`).toBe(2);
    for (const p of patterns) expect(w.stderr()).toMatch(p);
    expect(w.stderr()).not.toMatch(/invalid_type|expected string/);
  }
});

/** A TCP proxy to the ledger's server that resets its first `resets` connections, then passes the rest through. */
async function resettingProxy(target: string, resets: number): Promise<{ url: string; resetSoFar: () => number }> {
  const to = new URL(target);
  let seen = 0;
  const server: Server = createServer((client) => {
    client.on('error', () => undefined);
    if (seen++ < resets) {
      client.resetAndDestroy();
      return;
    }
    const upstream = connect(Number(to.port || 3306), to.hostname);
    upstream.on('error', () => client.destroy());
    client.on('close', () => upstream.destroy());
    client.pipe(upstream).pipe(client);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  cleanups.push(() => new Promise<void>((resolve) => server.close(() => resolve())));
  const address = server.address();
  if (address === null || typeof address === 'string') throw new Error('proxy: no port');
  const url = new URL(target);
  url.hostname = '127.0.0.1';
  url.port = String(address.port);
  return { url: url.toString(), resetSoFar: () => Math.min(seen, resets) };
}

test('a ledger resetting connections at start is waited out: the worker starts as it answers, runs work', async () => {
  const { tl, tw, dir } = await fixtures();
  const queue = uniqueQueue('reset');
  const proxy = await resettingProxy(tl.url, 3);
  const w = worker(['--handlers', handlerModule(dir, [queue]), '--queues', queue, '--admin', 'off'], {
    LANEWAKE_DATABASE_URL: proxy.url,
    LANEWAKE_REDIS_URL: redisUrl(),
    LANEWAKE_REDIS_KEY_PREFIX: tw.keyPrefix,
  });
  let exitCode: number | null | undefined;
  void w.exit.then((code) => {
    exitCode = code;
  });
  await waitFor(
    () => {
      // A worker that gave up is a failure now, with what it said, not a timeout later.
      if (exitCode !== undefined) throw new Error(`the worker exited ${exitCode}: ${w.stderr()}`);
      return logLines(w.stderr()).some((l) => l.msg === 'worker started') ? true : undefined;
    },
    60_000,
    'worker started',
  );
  expect(proxy.resetSoFar()).toBe(3);
  expect(
    logLines(w.stderr()).filter((l) => l.msg === 'ledger unreachable at start; trying again').length,
  ).toBeGreaterThan(0);
  const { id } = await new Producer({ ledger: tl.ledger, wake: tw.remote() }).enqueue({
    queue,
    type: 'job',
    payload: {},
  });
  await waitFor(
    async () => ((await mustGet(tl.ledger, id)).state === 'completed' ? true : undefined),
    30_000,
    'the item to run',
  );
  w.proc.kill('SIGTERM');
  expect(await w.exit).toBe(0);
});
