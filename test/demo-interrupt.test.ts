import { spawn } from 'node:child_process';
import { Redis } from 'ioredis';
import mysql, { type RowDataPacket } from 'mysql2/promise';
import { afterEach, expect, test } from 'vitest';
import { DEMO_QUEUE } from '../src/demo/handlers.js';
import { Ledger } from '../src/ledger/ledger.js';
import { waitFor } from './support/ledger.js';
import { mysqlServerUrl, redisUrl } from './support/services.js';

// `lanewake demo` interrupted as a user interrupts it: a signal to the demo's process while its
// worker replicas run. It must stop them, clean up (unless --keep) and exit 130.

const cleanups: (() => Promise<unknown>)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c().catch(() => undefined);
});

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

async function databaseExists(name: string): Promise<boolean> {
  const conn = await mysql.createConnection({ uri: mysqlServerUrl() });
  try {
    const [rows] = await conn.query<RowDataPacket[]>(
      'SELECT SCHEMA_NAME FROM information_schema.SCHEMATA WHERE SCHEMA_NAME = ?',
      [name],
    );
    return rows.length > 0;
  } finally {
    await conn.end();
  }
}

async function redisKeys(prefix: string): Promise<string[]> {
  const r = new Redis(redisUrl());
  try {
    return await r.keys(`${prefix}*`);
  } finally {
    r.disconnect();
  }
}

async function dropDatabase(name: string): Promise<void> {
  const conn = await mysql.createConnection({ uri: mysqlServerUrl() });
  await conn.query(`DROP DATABASE IF EXISTS \`${name}\``).finally(() => conn.end());
}

async function dropKeys(prefix: string): Promise<void> {
  const r = new Redis(redisUrl());
  try {
    const keys = await r.keys(`${prefix}*`);
    if (keys.length > 0) await r.del(...keys);
  } finally {
    r.disconnect();
  }
}

/**
 * Starts the demo, holds its queue paused once its database exists (so it cannot finish before the
 * signal), waits until its items are in and its replicas are live consumers, then sends `signal`.
 */
async function interruptDemo(
  signal: NodeJS.Signals,
  keep: boolean,
  times = 1,
): Promise<{ code: number | null; out: string; database: string; keyPrefix: string; pids: number[] }> {
  const args = [
    '--import',
    'tsx',
    'src/cli/main.ts',
    'demo',
    '--items',
    '400',
    '--lanes',
    '20',
    '--replicas',
    '2',
    '--no-progress',
    ...(keep ? ['--keep'] : []),
  ];
  const proc = spawn(process.execPath, args, {
    env: {
      ...process.env,
      LANEWAKE_DATABASE_URL: mysqlServerUrl(),
      LANEWAKE_REDIS_URL: redisUrl(),
      LANEWAKE_LOG_LEVEL: 'error',
    },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  proc.stdout.on('data', (d: Buffer) => (out += d.toString()));
  proc.stderr.on('data', (d: Buffer) => (out += d.toString()));
  const exit = new Promise<number | null>((resolve) => proc.on('exit', (code) => resolve(code)));
  // A demo still running when the test ends (it failed) is interrupted, so that it cleans up after itself;
  // killed if it does not exit.
  cleanups.push(async () => {
    if (proc.exitCode !== null || proc.signalCode !== null) return;
    proc.kill('SIGTERM');
    const timer = setTimeout(() => proc.kill('SIGKILL'), 120_000);
    await exit.finally(() => clearTimeout(timer));
  });

  const [, database = '', keyPrefix = ''] = await waitFor(
    () => /database (\S+): schema v\d+; redis key prefix (\S+)/.exec(out) ?? undefined,
    600_000,
    "the demo's database",
  );
  if (keep)
    cleanups.push(
      () => dropDatabase(database),
      () => dropKeys(keyPrefix),
    );
  const ledger = new Ledger({ url: `${mysqlServerUrl().replace(/\/+$/, '')}/${database}`, poolSize: 2 });
  try {
    await ledger.pause(DEMO_QUEUE);
    const pids = await waitFor(
      () => /pids ([\d, ]+)\)/.exec(out)?.[1]?.split(', ').map(Number),
      120_000,
      "the replicas' pids",
    );
    await waitFor(() => (/enqueued 400 items/.test(out) ? true : undefined), 300_000, 'the items enqueued');
    await waitFor(
      async () => ((await ledger.liveConsumers(DEMO_QUEUE)).length >= 2 ? true : undefined),
      120_000,
      'both replicas consuming',
    );
    expect(pids.every(alive)).toBe(true);
    await ledger.close();
    proc.kill(signal);
    // Each further signal once the demo has said it is stopping (two sent at once arrive as one).
    for (let i = 1; i < times; i++) {
      await waitFor(() => (/: stopping \(/.test(out) ? true : undefined), 60_000, 'the demo stopping');
      proc.kill(signal);
    }
    let exited: { code: number | null } | undefined;
    void exit.then((code) => (exited = { code }));
    const { code } = await waitFor(() => exited, 180_000, `the demo to exit after ${signal}`);
    return { code, out, database, keyPrefix, pids };
  } finally {
    await ledger.close().catch(() => undefined);
  }
}

test.each(['SIGINT', 'SIGTERM'] as const)(
  '%s stops the demo: its replicas exit, its database and Redis keys are dropped, and it exits 130',
  async (signal) => {
    const r = await interruptDemo(signal, false);
    expect(r.code, r.out).toBe(130);
    expect(r.pids.filter(alive), r.out).toEqual([]);
    expect(await databaseExists(r.database)).toBe(false);
    expect(await redisKeys(r.keyPrefix)).toEqual([]);
  },
  1_200_000,
);

test('a second SIGINT while it stops (Ctrl-C under npm run demo: the ' +
  "terminal's and npm's forwarded copy) still cleans up and exits 130", async () => {
  const r = await interruptDemo('SIGINT', false, 2);
  expect(r.code, r.out).toBe(130);
  expect(r.pids.filter(alive), r.out).toEqual([]);
  expect(await databaseExists(r.database)).toBe(false);
  expect(await redisKeys(r.keyPrefix)).toEqual([]);
}, 1_200_000);

test('with --keep an interrupted demo still stops its replicas ' +
  'and exits 130, and leaves its database and Redis keys', async () => {
  const r = await interruptDemo('SIGINT', true);
  expect(r.code, r.out).toBe(130);
  expect(r.pids.filter(alive), r.out).toEqual([]);
  expect(await databaseExists(r.database)).toBe(true);
  expect((await redisKeys(r.keyPrefix)).length).toBeGreaterThan(0);
}, 1_200_000);
