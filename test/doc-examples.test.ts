import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { fileURLToPath } from 'node:url';
import { sql } from 'kysely';
import { createConnection } from 'mysql2/promise';
import { afterEach, beforeEach, expect, test } from 'vitest';
import { docBlocks, exampleText } from '../scripts/docs-examples.js';
import { dropDatabase } from './support/ledger.js';
import { PrivateRedis } from './support/processes.js';
import { mysqlServerUrl } from './support/services.js';

// Every TypeScript or JavaScript block of README.md and docs/ shows an example file (examples/), which
// the repository's tsc compiles (tsconfig.json), test/package-types.test.ts compiles as a user's file
// against the packed package, and this file runs: each on a database it creates (LANEWAKE_DATABASE_URL,
// named for the run and dropped) and a redis-server of its own (LANEWAKE_REDIS_URL). A run must exit by
// itself: a connection left open keeps the process alive past the deadline and fails it. The handler
// module of operations/running.md is a module, not a program: its handlers run here, through lanewake/testing.

const ROOT = fileURLToPath(new URL('..', import.meta.url));
/** Generous: on TiDB a fresh database's migration alone takes a minute or two. A run that never exits still fails. */
const EXIT_DEADLINE_MS = 300_000;
const RUN_TIMEOUT_MS = EXIT_DEADLINE_MS + 60_000;

test('each code block of the docs is an example file, or the region of one, word for word', () => {
  const blocks = docBlocks();
  expect(blocks.length).toBeGreaterThan(0);
  for (const block of blocks) {
    const where = `${block.doc}:${block.open + 1}`;
    expect(block.source, `${where}: a code block with no <!-- example: examples/… --> line above it`).toBeDefined();
    expect(block.body, `${where} differs from ${block.source}: run \`npm run docs:examples\``).toBe(
      exampleText(block.source!),
    );
  }
});

let redis: PrivateRedis;
let database: string;
beforeEach(async () => {
  redis = await PrivateRedis.start();
  database = `lwt_example_${randomBytes(6).toString('hex')}`;
}, 120_000);
afterEach(async () => {
  await redis.destroy();
  await dropDatabase(database);
}, 120_000);

interface Exit {
  code: number | null;
  out: string;
  err: string;
}

/**
 * Runs `args` (a node process) with the example's servers in its environment; fails if it has
 * not exited by the deadline.
 */
function runNode(args: string[]): Promise<Exit> {
  const env = {
    ...process.env,
    LANEWAKE_DATABASE_URL: `${mysqlServerUrl().replace(/\/$/, '')}/${database}`,
    LANEWAKE_REDIS_URL: redis.url,
  };
  const child = spawn(process.execPath, args, { cwd: ROOT, env, stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  let err = '';
  child.stdout.on('data', (d: Buffer) => (out += d.toString()));
  child.stderr.on('data', (d: Buffer) => (err += d.toString()));
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`${args.join(' ')} had not exited after ${EXIT_DEADLINE_MS} ms:\n${out}${err}`));
    }, EXIT_DEADLINE_MS);
    child.on('exit', (code) => {
      clearTimeout(timer);
      resolve({ code, out, err });
    });
  });
}

const runExample = (file: string): Promise<Exit> => runNode(['--import', 'tsx', `examples/${file}`]);

async function query<T>(sql: string): Promise<T[]> {
  const c = await createConnection(`${mysqlServerUrl().replace(/\/$/, '')}/${database}`);
  try {
    return (await c.query(sql))[0] as T[];
  } finally {
    await c.end();
  }
}

test(
  'the README first example creates its database and table, invoices the order once, and exits',
  async () => {
    const r = await runExample('producing.ts');
    expect(r.err).toBe('');
    expect(r.out).toBe('invoice.send completed\n');
    expect(r.code).toBe(0);
    expect(await query('SELECT order_id FROM invoices')).toEqual([{ order_id: 'o-1' }]);
  },
  RUN_TIMEOUT_MS,
);

test(
  "the README's typed jobs run with the schema's output (the default copies filled in), and exit",
  async () => {
    const r = await runExample('typed-jobs.ts');
    expect(r.err).toBe('');
    expect(r.out).toBe('invoice.send completed {"orderId":"A1","copies":1}\n');
    expect(r.code).toBe(0);
  },
  RUN_TIMEOUT_MS,
);

test(
  "the README's outbox: the receipt enqueued in the payment's " +
    'transaction runs once it committed, and the process exits',
  async () => {
    const r = await runExample('outbox.ts');
    expect(r.err).toBe('');
    expect(r.out).toBe('receipt completed\n');
    expect(r.code).toBe(0);
    expect(await query("SELECT state FROM orders WHERE id = 'o-1'")).toEqual([{ state: 'paid' }]);
  },
  RUN_TIMEOUT_MS,
);

test(
  "the README's workflow runs its jobs in order and its fan-in sees both parents, and exits",
  async () => {
    const r = await runExample('workflow.ts');
    expect(r.err).toBe('');
    expect(r.out).toBe("completed [ 'charts:completed', 'totals:completed' ]\n");
    expect(r.code).toBe(0);
  },
  RUN_TIMEOUT_MS,
);

test(
  "the README's handler shapes each complete their item, and exit",
  async () => {
    const r = await runExample('handler-shapes.ts');
    expect(r.err).toBe('');
    expect(r.out).toBe(
      ['entity.sync completed', 'partner.call completed', 'repo.sync completed', 'search.index completed', ''].join(
        '\n',
      ),
    );
    expect(r.code).toBe(0);
  },
  RUN_TIMEOUT_MS,
);

test(
  "testing.md's vitest suite passes, and passes again on the same database",
  async () => {
    const vitest = [
      'node_modules/vitest/vitest.mjs',
      'run',
      '--config',
      'test/support/examples.vitest.config.ts',
      'examples/billing.test.ts',
    ];
    for (const run of [1, 2]) {
      const r = await runNode(vitest);
      expect(r.code, `run ${run}:\n${r.out}${r.err}`).toBe(0);
      expect(r.out.replace(/\x1b\[[0-9;]*m/g, ''), r.out).toMatch(/Tests\s+2 passed \(2\)/);
    }
    expect(await query<{ n: number }>('SELECT COUNT(*) AS n FROM invoices')).toEqual([{ n: 2 }]);
  },
  2 * RUN_TIMEOUT_MS,
);

test(
  "design/states.md's use of the ledger alone enqueues in the caller's transaction, claims and completes, and exits",
  async () => {
    const r = await runExample('ledger-direct.ts');
    expect(r.err).toBe('');
    expect(r.out).toBe('1 completed\n');
    expect(r.code).toBe(0);
    expect(await query<{ n: number }>('SELECT COUNT(*) AS n FROM orders')).toEqual([{ n: 1 }]);
  },
  RUN_TIMEOUT_MS,
);

test(
  "operations/observing.md's diagnostics subscriber sees the consumer's claim rounds, and the process exits",
  async () => {
    const r = await runExample('diagnostics.ts');
    expect(r.err).toBe('');
    expect(r.out).toMatch(/^\d+ claimed$/m);
    expect(r.code).toBe(0);
  },
  RUN_TIMEOUT_MS,
);

test(
  "operations/running.md's handler module: invoice.send blocks if unpaid, invoices once if paid; mail.ping answers",
  async () => {
    const { handlers } = await import('../examples/handlers.js');
    const { createTestLedger } = await import('./support/ledger.js');
    const { createTestRunner } = await import('lanewake/testing');
    const tl = await createTestLedger();
    try {
      await sql`CREATE TABLE orders (id VARCHAR(64) PRIMARY KEY, paid_at DATETIME NULL)`.execute(tl.ledger.db);
      await sql`CREATE TABLE invoices (order_id VARCHAR(64) NOT NULL, amount_cents BIGINT NOT NULL)`.execute(
        tl.ledger.db,
      );
      await sql`INSERT INTO orders (id, paid_at) VALUES ('unpaid', NULL), ('paid', NOW())`.execute(tl.ledger.db);
      const runner = createTestRunner({ ledger: tl.ledger });
      const invoice = (orderId: string) =>
        runner.run(handlers.billing['invoice.send'], { payload: { orderId, amountCents: 1200 } }, { db: tl.ledger.db });
      const unpaid = await invoice('unpaid');
      expect(unpaid, String((unpaid as { error?: unknown }).error)).toMatchObject({
        outcome: 'blocked',
        dependencyKey: 'payment:unpaid',
      });
      expect(await invoice('paid')).toMatchObject({ outcome: 'completed', result: { invoiced: 'paid' } });
      expect(await invoice('nosuch')).toMatchObject({ outcome: 'failed', failureClass: 'no_such_order' });
      expect((await sql<{ order_id: string }>`SELECT order_id FROM invoices`.execute(tl.ledger.db)).rows).toEqual([
        { order_id: 'paid' },
      ]);
      expect(await runner.run(handlers.mail['mail.ping'], { payload: {} })).toMatchObject({
        outcome: 'completed',
        result: { pong: true },
      });
    } finally {
      await tl.drop();
    }
  },
  RUN_TIMEOUT_MS,
);
