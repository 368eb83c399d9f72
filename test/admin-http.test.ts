// The admin server's routes (/livez, /readyz, /version, /api/queues, the dashboard page, errors) and ledgerReadiness.
import { expect, test } from 'vitest';
import { Ledger } from '../src/ledger/ledger.js';
import { SCHEMA_VERSION } from '../src/ledger/migrations.js';
import { ledgerReadiness, type Readiness } from '../src/supervisor/admin-server.js';
import { uniqueQueue } from './support/engine.js';
import { adminScope } from './support/admin.js';

const { testLedger, server } = adminScope();

test(
  '/livez, /readyz, /version, /api/queues, the dashboard page ' +
    'without its bundle, 404 and 405 on a migrated ledger',
  async () => {
    const tl = await testLedger();
    const queue = uniqueQueue('adm');
    await tl.ledger.enqueue({ queue, type: 't', payload: {} });
    const admin = await server({ ledger: tl.ledger });
    expect(admin.url).toBe(`http://127.0.0.1:${admin.port}`);
    expect(admin.port).toBeGreaterThan(0);

    const live = await fetch(`${admin.url}/livez`);
    expect(live.status).toBe(200);
    expect(await live.text()).toBe('ok\n');

    const ready = await fetch(`${admin.url}/readyz`);
    expect(ready.status).toBe(200);
    expect(ready.headers.get('content-type')).toMatch(/^application\/json/);
    expect(await ready.json()).toEqual({
      ready: true,
      checks: { ledger: { ok: true }, migrations: { ok: true, detail: `schema version ${SCHEMA_VERSION}` } },
    });

    const version = await fetch(`${admin.url}/version`);
    expect(version.status).toBe(200);
    expect(await version.json()).toEqual({ name: 'lanewake', version: '9.8.7-test', node: process.version });

    const queues = await fetch(`${admin.url}/api/queues?ignored=1`);
    expect(queues.status).toBe(200);
    const list = (await queues.json()) as {
      queue: string;
      counts: Record<string, { count: number; atLeast: boolean }>;
    }[];
    expect(list).toHaveLength(1);
    expect(list[0]).toMatchObject({
      queue,
      counts: { pending: { count: 1, atLeast: false }, dead: { count: 0, atLeast: false } },
    });

    // The bundle is not built here (test/dashboard.test.ts serves one): the page says how to build it.
    const page = await fetch(`${admin.url}/`);
    expect(page.status).toBe(503);
    expect(page.headers.get('content-security-policy')).toContain("script-src 'self'");
    expect(await page.text()).toContain('npm run build:dashboard');

    const missing = await fetch(`${admin.url}/nope`);
    expect(missing.status).toBe(404);
    expect(await missing.json()).toEqual({ error: 'not found' });

    const post = await fetch(`${admin.url}/metrics`, { method: 'POST', body: 'x' });
    expect(post.status).toBe(405);
    expect(post.headers.get('allow')).toBe('GET');
    const del = await fetch(`${admin.url}/livez`, { method: 'DELETE' });
    expect(del.status).toBe(405);

    await admin.close();
    await expect(fetch(`${admin.url}/livez`)).rejects.toThrow();
  },
);

test('/readyz is 503 on an unmigrated database, naming the migrations check', async () => {
  const tl = await testLedger(false);
  const admin = await server({ ledger: tl.ledger });
  const res = await fetch(`${admin.url}/readyz`);
  expect(res.status).toBe(503);
  const body = (await res.json()) as Readiness;
  expect(body.ready).toBe(false);
  expect(body.checks.ledger).toEqual({ ok: true });
  expect(body.checks.migrations?.ok).toBe(false);
  expect(body.checks.migrations?.detail).toContain(`behind the required ${SCHEMA_VERSION}`);
});

test('ledgerReadiness: unreachable ledger, failing, throwing and hanging extra checks are not ready', async () => {
  const tl = await testLedger();
  const passing = { name: 'ownership:a', check: async () => ({ ok: true, detail: 'epoch 1' }) };
  expect(await ledgerReadiness(tl.ledger, [passing])).toEqual({
    ready: true,
    checks: {
      ledger: { ok: true },
      migrations: { ok: true, detail: `schema version ${SCHEMA_VERSION}` },
      'ownership:a': { ok: true, detail: 'epoch 1' },
    },
  });

  const r = await ledgerReadiness(
    tl.ledger,
    [
      passing,
      { name: 'ownership:b', check: async () => ({ ok: false, detail: 'epoch 2 superseded by 3' }) },
      { name: 'ownership:c', check: () => Promise.reject(new Error('control stream gone')) },
      { name: 'ownership:d', check: () => new Promise(() => undefined) },
      // A repeated name keeps the failure.
      { name: 'ownership:b', check: async () => ({ ok: true }) },
    ],
    // The same timeout bounds the ledger's own checks: long enough for them on a busy machine.
    { timeoutMs: 1_500 },
  );
  expect(r.ready).toBe(false);
  expect(r.checks).toEqual({
    ledger: { ok: true },
    migrations: { ok: true, detail: `schema version ${SCHEMA_VERSION}` },
    'ownership:a': { ok: true, detail: 'epoch 1' },
    'ownership:b': { ok: false, detail: 'epoch 2 superseded by 3' },
    'ownership:c': { ok: false, detail: 'control stream gone' },
    'ownership:d': { ok: false, detail: 'no answer within 1500 ms' },
  });

  // Nothing listens on port 1: connection refused at once.
  const gone = new Ledger({ url: 'mysql://root@127.0.0.1:1/lanewake_gone', poolSize: 1 });
  try {
    const down = await ledgerReadiness(gone, [], { timeoutMs: 5_000 });
    expect(down.ready).toBe(false);
    expect(down.checks.ledger?.ok).toBe(false);
    expect(down.checks.ledger?.detail).toMatch(/ECONNREFUSED/);
    expect(down.checks.migrations?.ok).toBe(false);
  } finally {
    await gone.close().catch(() => undefined);
  }
});

test('a failing route answers 500 with a JSON error and the server keeps serving', async () => {
  const tl = await testLedger();
  const admin = await server({
    ledger: tl.ledger,
    dashboard: {
      backend: () => {
        throw new Error('stats exploded');
      },
    },
    readiness: () => {
      throw new Error('readiness exploded');
    },
  });
  const queues = await fetch(`${admin.url}/api/queues`);
  expect(queues.status).toBe(500);
  expect(await queues.json()).toEqual({ error: 'stats exploded' });
  const ready = await fetch(`${admin.url}/readyz`);
  expect(ready.status).toBe(500);
  expect(await ready.json()).toEqual({ error: 'readiness exploded' });
  const live = await fetch(`${admin.url}/livez`);
  expect(live.status).toBe(200);
});
