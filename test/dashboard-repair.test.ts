// The dashboard's repair action (admin-token guarded, refused (409) when the item moved on, the actor in the item's
// history), and its stale-only mark.
import { join } from 'node:path';
import { tmpdir } from 'node:os';
import { expect, test } from 'vitest';
import { errorDigest } from '../src/ledger/ids.js';
import { ledgerReadiness, startAdminServer } from '../src/supervisor/admin-server.js';
import { captureLog } from './support/captured-log.js';
import { claimOne, freshQueue, history, mustGet } from './support/items.js';
import { testScope } from './support/scope.js';

const scope = testScope();
const TOKEN = 'test-token-0123456789abcdef';

test('dashboard repair: token required, guarded by what the page showed, recorded with its actor', async () => {
  const { ledger } = await scope.ledger();
  const log = captureLog();
  const admin = await startAdminServer({
    port: 0,
    readiness: () => ledgerReadiness(ledger),
    dashboard: {
      backend: () => ({ ledger, wake: undefined }),
      adminToken: TOKEN,
      staticDir: join(tmpdir(), 'lanewake-no-dashboard-bundle'),
    },
    version: '1.2.3-test',
    logger: log.logger,
  });
  scope.cleanup(() => admin.close());
  const act = (path: string, body: unknown, token = TOKEN): Promise<Response> =>
    fetch(`${admin.url}${path}`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-lanewake-admin-token': token, 'x-lanewake-actor': 'ada' },
      body: JSON.stringify(body),
    });

  const queue = freshQueue('dash-repair');
  const { id } = await ledger.enqueue({ queue, type: 't', payload: 1, lane: 'L' });
  await ledger.fail(await claimOne(ledger, queue), { error: 'boom' });
  const dead = await mustGet(ledger, id);
  const guard = {
    expectAttempt: dead.attempt,
    expectErrorDigest: errorDigest(dead.lastError),
    reason: 'fixed the config',
  };

  expect((await act(`/api/items/${id}/repair`, guard, 'wrong-token')).status).toBe(401);
  const stale = await act(`/api/items/${id}/repair`, { ...guard, expectAttempt: 7 });
  expect(stale.status).toBe(409);
  expect(await stale.json()).toMatchObject({ reason: 'attempt_mismatch' });
  const noReason = await act(`/api/items/${id}/repair`, { ...guard, reason: '' });
  expect(noReason.status).toBe(400);
  expect((await mustGet(ledger, id)).state).toBe('dead');

  const ok = await act(`/api/items/${id}/repair`, guard);
  expect(ok.status).toBe(200);
  expect(await ok.json()).toMatchObject({ id, isHead: true, duplicate: false });
  expect(await mustGet(ledger, id)).toMatchObject({ state: 'pending', isHead: true, attempt: 0 });
  expect((await history(ledger, id)).at(-1)).toMatchObject({
    outcome: 'repaired',
    worker: 'dashboard:ada',
    error: 'fixed the config',
  });
  expect(log.lines.some((r) => r.msg === 'admin action' && r.action === 'repair' && r.count === 1)).toBe(true);
});

test('the queue list says a queue is stale-only', async () => {
  const { ledger } = await scope.ledger();
  const admin = await startAdminServer({
    port: 0,
    readiness: () => ledgerReadiness(ledger),
    dashboard: {
      backend: () => ({ ledger, wake: undefined }),
      staticDir: join(tmpdir(), 'lanewake-no-dashboard-bundle'),
    },
    version: '1.2.3-test',
    logger: captureLog().logger,
  });
  scope.cleanup(() => admin.close());
  const queue = freshQueue('dash-stale');
  await ledger.enqueue({ queue, type: 't', payload: 1 });
  const view = async (): Promise<{ staleOnly: boolean } | undefined> =>
    ((await (await fetch(`${admin.url}/api/queues`)).json()) as { queue: string; staleOnly: boolean }[]).find(
      (q) => q.queue === queue,
    );
  expect(await view()).toMatchObject({ staleOnly: false });
  await ledger.setStaleOnly(queue, true);
  expect(await view()).toMatchObject({ staleOnly: true });
});
