import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { expect, test } from 'vitest';
import { errorDigest } from '../src/ledger/ids.js';
import type { Ledger } from '../src/ledger/ledger.js';
import type { ItemSummary } from '../src/ledger/operator-types.js';
import { ledgerReadiness, startAdminServer, type AdminServer } from '../src/supervisor/admin-server.js';
import { configFromEnv, resolveWorkerConfig } from '../src/supervisor/config-sources.js';
import type { WakeChannel } from '../src/wake/wake-channel.js';
import { captureLog, type CapturedLog } from './support/captured-log.js';
import { claimAll, freshQueue } from './support/items.js';
import { testScope } from './support/scope.js';

const scope = testScope();
const TOKEN = 'test-token-0123456789abcdef';

interface Served {
  admin: AdminServer;
  log: CapturedLog;
  get: (path: string) => Promise<Response>;
  /** A POST as the dashboard sends it: JSON, the token, an actor. */
  act: (path: string, body?: unknown, headers?: Record<string, string>) => Promise<Response>;
}

async function serve(
  ledger: Ledger,
  opts: { token?: string; showPayloads?: boolean; wake?: WakeChannel; staticDir?: string } = {},
): Promise<Served> {
  const log = captureLog();
  const admin = await startAdminServer({
    port: 0,
    readiness: () => ledgerReadiness(ledger),
    dashboard: {
      backend: () => ({ ledger, wake: opts.wake }),
      adminToken: opts.token,
      showPayloads: opts.showPayloads,
      staticDir: opts.staticDir ?? join(tmpdir(), 'lanewake-no-dashboard-bundle'),
    },
    version: '1.2.3-test',
    logger: log.logger,
  });
  scope.cleanup(() => admin.close());
  return {
    admin,
    log,
    get: (path) => fetch(`${admin.url}${path}`),
    act: (path, body = {}, headers = {}) =>
      fetch(`${admin.url}${path}`, {
        method: 'POST',
        headers: {
          'content-type': 'application/json',
          'x-lanewake-admin-token': TOKEN,
          'x-lanewake-actor': 'ada',
          ...headers,
        },
        body: JSON.stringify(body),
      }),
  };
}

async function json<T>(res: Response | Promise<Response>, status = 200): Promise<T> {
  const r = await res;
  const body = (await r.json()) as T;
  expect(r.status, JSON.stringify(body)).toBe(status);
  return body;
}

/** Makes every item of the queue dead (claimed, then failed). */
async function killAll(ledger: Ledger, queue: string, error = 'boom'): Promise<void> {
  for (const item of await claimAll(ledger, queue)) await ledger.fail(item, { error: new Error(error) });
}

test('read API: session, queues, item pages across pages with filters, lanes, dead groups, one item', async () => {
  const { ledger } = await scope.ledger();
  const s = await serve(ledger);
  const queue = freshQueue('dash');
  const made: string[] = [];
  for (let i = 0; i < 7; i++)
    made.push(
      (
        await ledger.enqueue({
          queue,
          type: i < 3 ? 'doomed' : 'fine',
          payload: { secret: i },
          lane: i < 3 ? undefined : 'L',
        })
      ).id,
    );
  await killAll(ledger, queue);
  // claimAll took the heads: the three lone items and L's head are dead now; L's other three wait.

  expect(await json(s.get('/api/session'))).toEqual({ canAct: false, showPayloads: false, version: '1.2.3-test' });
  const [view] = await json<
    {
      queue: string;
      counts: Record<string, { count: number; atLeast: boolean }>;
      paused: boolean;
      series: { points: unknown[] };
    }[]
  >(s.get('/api/queues'));
  expect(view).toMatchObject({
    queue,
    counts: { dead: { count: 4, atLeast: false }, pending: { count: 3, atLeast: false } },
    paused: false,
  });
  expect(view?.series.points).toHaveLength(60);

  const ids: string[] = [];
  let pages = 0;
  for (let after = ''; ; ) {
    const page = await json<{ items: ItemSummary[]; next: string | null }>(
      s.get(`/api/queues/${queue}/items?state=dead&limit=3${after ? `&after=${after}` : ''}`),
    );
    pages++;
    ids.push(...page.items.map((i) => i.id));
    if (page.next === null) break;
    after = encodeURIComponent(page.next);
  }
  expect(pages).toBe(2);
  expect(ids).toEqual([made[3], made[2], made[1], made[0]]);
  const typed = await json<{ items: ItemSummary[] }>(s.get(`/api/queues/${queue}/items?type=fine&lane=L`));
  expect(typed.items.map((i) => i.id)).toEqual([made[6], made[5], made[4], made[3]]);

  const lanes = await json<{ lanes: { lane: string; headId: string; pending: number }[] }>(
    s.get(`/api/queues/${queue}/lanes`),
  );
  expect(lanes.lanes).toEqual([
    expect.objectContaining({ lane: 'L', headId: made[4], pending: 3, headState: 'pending' }),
  ]);
  const inLane = await json<{ items: ItemSummary[]; next: string | null }>(
    s.get(`/api/queues/${queue}/lanes/L/items?limit=2`),
  );
  expect(inLane.items.map((i) => [i.id, i.isHead])).toEqual([
    [made[3], false],
    [made[4], true],
  ]);
  expect(inLane.next).not.toBeNull();

  const dead = await json<{ groups: { type: string; count: number; sampleId: string }[] }>(
    s.get(`/api/dead?queue=${queue}`),
  );
  expect(dead.groups.map((g) => [g.type, g.count]).sort()).toEqual([
    ['doomed', 3],
    ['fine', 1],
  ]);

  const detail = await json<{
    item: Record<string, unknown>;
    attempts: unknown[];
    steps: unknown[];
    group: string[];
    why: { code: string };
  }>(s.get(`/api/items/${made[0]}`));
  expect(detail.item).toMatchObject({
    id: made[0],
    state: 'dead',
    attempt: 1,
    errorDigest: errorDigest((await ledger.get(made[0] ?? ''))?.lastError ?? null),
  });
  expect(detail.item).not.toHaveProperty('payload');
  expect(detail.attempts).toHaveLength(1);
  expect(detail.group).toEqual([]);
  expect(detail.why.code).toBeTypeOf('string');
  expect((await s.get('/api/items/nosuchitem')).status).toBe(404);
});

test('payloads only with showPayloads', async () => {
  const { ledger } = await scope.ledger();
  const s = await serve(ledger, { showPayloads: true });
  const queue = freshQueue('dash');
  const { id } = await ledger.enqueue({ queue, type: 't', payload: { secret: 1 } });
  expect(await json(s.get('/api/session'))).toMatchObject({ showPayloads: true });
  expect((await json<{ item: { payload: unknown } }>(s.get(`/api/items/${id}`))).item.payload).toEqual({ secret: 1 });
});

test('bad input answers 400 naming the field, and reads nothing', async () => {
  const { ledger } = await scope.ledger();
  const s = await serve(ledger, { token: TOKEN });
  const cases: [Promise<Response>, string][] = [
    [s.get('/api/queues/q/items?limit=1000'), 'limit'],
    [s.get('/api/queues/q/items?limit=ten'), 'limit'],
    [s.get('/api/queues/q/items?state=sleeping'), 'state'],
    [s.get('/api/queues/q/items?after=nonsense'), 'after'],
    [s.get('/api/queues/Not%20A%20Queue/items'), 'queue'],
    [s.get('/api/items/not%20an%20id'), 'id'],
    [s.act('/api/items/abc/replay', { expectAttempt: 1, expectErrorDigest: 'nope' }), 'expectErrorDigest'],
    [s.act('/api/replay', { queue: 'q' }), 'dryRun'],
    [s.act('/api/purge', { queue: 'q', state: 'pending', dryRun: true }), 'state'],
    [s.act('/api/purge', { queue: 'q', state: 'dead', dryRun: true, olderThan: 5 }), 'olderThan'],
    [s.act('/api/items/abc/cancel', { reason: 7 }), 'reason'],
  ];
  for (const [res, field] of cases) {
    const body = await json<{ error: string; field: string }>(res, 400);
    expect(body.field).toBe(field);
    expect(body.error).toContain(field);
  }
  const notJson = await fetch(`${s.admin.url}/api/purge`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'x-lanewake-admin-token': TOKEN },
    body: '{',
  });
  expect(await json(notJson, 400)).toMatchObject({ field: 'body' });
});

test(
  'actions: replay one under its guard (409 when it moved on), cancel, pause ' +
    'and resume announced, bulk replay and purge with dry runs, each logged',
  async () => {
    const { ledger } = await scope.ledger();
    const tw = scope.wake();
    const s = await serve(ledger, { token: TOKEN, wake: tw.wake });
    const queue = freshQueue('dash');
    const made = await ledger.enqueueMany(
      Array.from({ length: 4 }, (_, i) => ({ queue, type: i === 0 ? 'solo' : 'bulk', payload: {} })),
    );
    await killAll(ledger, queue);
    const first = made[0]?.id ?? '';
    const digest = errorDigest((await ledger.get(first))?.lastError ?? null);

    expect(
      await json(s.act(`/api/items/${first}/replay`, { expectAttempt: 2, expectErrorDigest: digest }), 409),
    ).toMatchObject({ reason: 'attempt_mismatch' });
    const replayed = await json<{ id: string }>(
      s.act(`/api/items/${first}/replay`, { expectAttempt: 1, expectErrorDigest: digest }),
    );
    expect((await ledger.get(replayed.id))?.replayOf).toBe(first);
    expect(
      await json(s.act(`/api/items/${first}/replay`, { expectAttempt: 1, expectErrorDigest: digest }), 409),
    ).toMatchObject({ reason: 'already_replayed' });

    expect(await json(s.act(`/api/items/${replayed.id}/cancel`, { reason: 'not today' }))).toEqual({
      outcome: 'cancelled',
    });
    expect((await ledger.get(replayed.id))?.state).toBe('cancelled');

    const before = await tw.wake.control.latestId(tw.wake.redis, queue);
    expect(await json(s.act(`/api/queues/${queue}/pause`))).toEqual({ queue, paused: true });
    expect(await ledger.pausedQueues([queue])).toEqual(new Set([queue]));
    const announced = await tw.wake.control.latestId(tw.wake.redis, queue);
    expect(announced).not.toBe(before);
    expect(await json(s.act(`/api/queues/${queue}/resume`))).toEqual({ queue, paused: false });
    expect(await ledger.pausedQueues([queue])).toEqual(new Set());
    expect(await tw.wake.control.latestId(tw.wake.redis, queue)).not.toBe(announced);

    expect(await json(s.act('/api/replay', { queue, type: 'bulk', dryRun: true }))).toEqual({ count: 3 });
    expect(await json(s.act('/api/replay', { queue, type: 'bulk', dryRun: false }))).toEqual({
      replayed: 3,
      skipped: 0,
    });
    expect(await json(s.act('/api/replay', { queue, type: 'bulk', dryRun: true }))).toEqual({ count: 0 });

    expect(await json(s.act('/api/purge', { queue, state: 'cancelled', dryRun: true }))).toEqual({ count: 1 });
    expect(await json(s.act('/api/purge', { queue, state: 'cancelled', dryRun: false }))).toEqual({ purged: 1 });
    expect(await ledger.get(replayed.id)).toBeUndefined();

    const lines = s.log.at(30, /^admin action$/);
    expect(lines.map((l) => [l.action, l.count])).toEqual([
      ['replay', 0],
      ['replay', 1],
      ['replay', 0],
      ['cancel', 1],
      ['pause', 1],
      ['resume', 1],
      ['replay-dead', 3],
      ['replay-dead', 3],
      ['replay-dead', 0],
      ['purge', 1],
      ['purge', 1],
    ]);
    expect(lines[1]).toMatchObject({ actor: 'ada', remote: expect.stringMatching(/127\.0\.0\.1/), id: first });
    expect(lines[6]).toMatchObject({ queue, filter: { queue, type: 'bulk', dryRun: true } });
  },
);

test(
  'the rules of a POST: 403 read-only, 401 without the right token, ' +
    '415 unless JSON, 405 for the wrong method; nothing changes',
  async () => {
    const { ledger } = await scope.ledger();
    const queue = freshQueue('dash');
    const readOnly = await serve(ledger);
    const pause = `/api/queues/${queue}/pause`;
    expect(await json(readOnly.act(pause), 403)).toEqual({ error: 'read-only: start with --admin-token' });

    const s = await serve(ledger, { token: TOKEN });
    expect(await json(s.get('/api/session'))).toMatchObject({ canAct: true });
    await json(s.act(pause, {}, { 'x-lanewake-admin-token': 'wrong' }), 401);
    await json(
      fetch(`${s.admin.url}${pause}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{}' }),
      401,
    );
    await json(s.act(pause, {}, { 'content-type': 'application/x-www-form-urlencoded' }), 415);
    await json(s.act(pause, {}, { 'content-type': 'text/plain' }), 415);
    const get = await s.get(pause);
    expect(get.status).toBe(405);
    expect(get.headers.get('allow')).toBe('POST');
    const post = await s.act(`/api/queues/${queue}/items`);
    expect(post.status).toBe(405);
    expect(post.headers.get('allow')).toBe('GET');
    expect(await ledger.pausedQueues([queue])).toEqual(new Set());
    expect(s.log.at(30, /^admin action$/)).toEqual([]);
    expect(readOnly.log.at(30, /^admin action$/)).toEqual([]);
  },
);

test('static files: index.html with the CSP, hashed assets cached for good, nothing outside assets/', async () => {
  const { ledger } = await scope.ledger();
  const dir = await mkdtemp(join(tmpdir(), 'lanewake-dashboard-'));
  scope.cleanup(() => rm(dir, { recursive: true, force: true }));
  await mkdir(join(dir, 'assets'));
  await writeFile(join(dir, 'index.html'), '<!doctype html><script type="module" src="/assets/app-1a2b.js"></script>');
  await writeFile(join(dir, 'assets', 'app-1a2b.js'), 'console.log(1)');
  await writeFile(join(dir, 'assets', 'app-1a2b.css'), 'body{}');
  await writeFile(join(dir, 'secret.txt'), 'not served');
  const s = await serve(ledger, { staticDir: dir });

  const page = await s.get('/');
  expect(page.status).toBe(200);
  expect(page.headers.get('content-type')).toBe('text/html; charset=utf-8');
  expect(page.headers.get('content-security-policy')).toBe(
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src " +
      "'self'; font-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
  );
  expect(page.headers.get('x-content-type-options')).toBe('nosniff');
  expect(page.headers.get('referrer-policy')).toBe('no-referrer');
  expect(await page.text()).toContain('/assets/app-1a2b.js');

  const js = await s.get('/assets/app-1a2b.js');
  expect(js.status).toBe(200);
  expect(js.headers.get('content-type')).toBe('text/javascript; charset=utf-8');
  expect(js.headers.get('cache-control')).toBe('public, max-age=31536000, immutable');
  expect(await js.text()).toBe('console.log(1)');
  expect((await s.get('/assets/app-1a2b.css')).headers.get('content-type')).toBe('text/css; charset=utf-8');

  for (const path of [
    '/assets/missing.js',
    '/assets/..%2Fsecret.txt',
    '/assets/%2E%2E/secret.txt',
    '/secret.txt',
    '/assets/',
  ]) {
    expect((await s.get(path)).status, path).toBe(404);
  }
  expect((await fetch(`${s.admin.url}/`, { method: 'POST' })).status).toBe(405);
});

test(
  'a worker takes its token from LANEWAKE_ADMIN_TOKEN, refuses a ' +
    'short one naming adminToken, and hides payloads by default',
  () => {
    const base = { databaseUrl: 'mysql://root@127.0.0.1:3306/x', handlers: './h.js', queues: [{ name: 'q' }] };
    const config = resolveWorkerConfig([base, configFromEnv({ LANEWAKE_ADMIN_TOKEN: TOKEN })]);
    expect(config).toMatchObject({ adminToken: TOKEN, showPayloads: false });
    expect(() => resolveWorkerConfig([base, { adminToken: 'short' }])).toThrow(
      expect.objectContaining({ fields: ['adminToken'] }),
    );
  },
);

test('the schedules page reads every schedule with its next fire; their payloads only with showPayloads', async () => {
  const { ledger } = await scope.ledger();
  const queue = freshQueue('dash-sched');
  await ledger.schedules.upsert({
    name: `${queue}-nightly`,
    pattern: '0 3 * * *',
    tz: 'Europe/Paris',
    item: { queue, type: 'report', payload: { secret: 1 } },
  });
  await ledger.schedules.pause(`${queue}-nightly`);
  const hidden = await json<{ now: string; schedules: Record<string, unknown>[] }>(
    (await serve(ledger)).get('/api/schedules'),
  );
  expect(Date.parse(hidden.now)).not.toBeNaN();
  expect(hidden.schedules).toEqual([
    expect.objectContaining({
      name: `${queue}-nightly`,
      source: 'api',
      pattern: '0 3 * * *',
      tz: 'Europe/Paris',
      paused: true,
      fires: 0,
      item: { queue, type: 'report' },
    }),
  ]);
  expect(Date.parse(String(hidden.schedules[0]?.nextFireAt))).toBeGreaterThan(Date.parse(hidden.now));
  const shown = await json<{ schedules: { item: unknown }[] }>(
    (await serve(ledger, { showPayloads: true })).get('/api/schedules'),
  );
  expect(shown.schedules[0]?.item).toEqual({ queue, type: 'report', payload: { secret: 1 } });
});
