import { execFileSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import type { Browser, BrowserContext, Page } from 'playwright-core';
import { afterAll, beforeAll, beforeEach, expect, test } from 'vitest';
import { Consumer } from '../src/consumer/consumer.js';
import { PermanentError } from '../src/consumer/errors.js';
import { Producer } from '../src/producer/producer.js';
import { describeInChromium, launchChromium } from './support/browser.js';
import { startTestDashboard } from './support/dashboard.js';
import { uniqueQueue } from './support/engine.js';
import { waitFor, type TestLedger } from './support/ledger.js';
import { testScope } from './support/scope.js';

// The operator dashboard in a real browser (docs/dashboard.md): Debian's chromium driven by playwright-core,
// against the real dashboard server on a test ledger, with real consumers.

const TOKEN = 'test-admin-token';
/** The pages poll every 2 s: a page catches up within a few of its polls. */
const POLL = { timeout: 15_000, interval: 100 };
const scope = testScope();
let browser: Browser;
let tl: TestLedger;

/** A fresh browser context (its own sessionStorage) whose page fails the test on a script error or a CSP violation. */
async function openPage(): Promise<{ page: Page; problems: string[] }> {
  const context: BrowserContext = await browser.newContext({ viewport: { width: 1280, height: 800 } });
  scope.cleanup(() => context.close());
  context.setDefaultTimeout(20_000);
  const page = await context.newPage();
  const problems: string[] = [];
  page.on('pageerror', (e) => problems.push(`page error: ${e.message}`));
  page.on('console', (m) => {
    if (m.type() === 'error' && !/status of 40[13]/.test(m.text())) problems.push(`console: ${m.text()}`);
  });
  return { page, problems };
}

/** Answers the token prompt the first action of a session opens. */
async function signIn(page: Page): Promise<void> {
  const dialog = page.getByRole('dialog', { name: 'Admin token' });
  await dialog.getByLabel('Token').fill(TOKEN);
  // Typed key by key, as a person does: the focus must stay in the field being typed in.
  await dialog.getByLabel(/Your name/).pressSequentially('browser-test');
  await dialog.getByRole('button', { name: 'Continue' }).click();
}

/** A consumer whose `job` handler fails for good while `broken.now`, else succeeds; started for the test. */
async function brokenConsumer(queue: string, broken: { now: boolean }) {
  const tw = scope.wake();
  const started: string[] = [];
  const handle = async (job: { id: string }): Promise<void> => {
    started.push(job.id);
    if (broken.now) throw new PermanentError('upstream said no', 'upstream_refused');
  };
  const consumer = new Consumer({
    ledger: tl.ledger,
    wake: tw.wake,
    queue,
    concurrency: 4,
    pollIntervalMs: 200,
    handlers: { a: handle, b: handle },
  });
  await scope.start(consumer);
  return { tw, consumer, started, producer: new Producer({ ledger: tl.ledger, wake: tw.wake }) };
}

async function stateOf(id: string): Promise<string | undefined> {
  return (await tl.ledger.get(id))?.state;
}

describeInChromium('the dashboard in chromium', () => {
  beforeAll(async () => {
    if (!existsSync(new URL('../dist/dashboard/index.html', import.meta.url))) {
      execFileSync('npm', ['run', 'build:dashboard'], { cwd: new URL('..', import.meta.url), stdio: 'pipe' });
    }
    browser = await launchChromium();
  });
  afterAll(async () => {
    await browser?.close();
  });

  beforeEach(async () => {
    tl = await scope.ledger();
  });

  test('a dead item is found in the dead letters, replayed with the token, its replay seen completing', async () => {
    const queue = uniqueQueue('dashreplay');
    const broken = { now: true };
    const { tw, producer } = await brokenConsumer(queue, broken);
    const { id } = await producer.enqueue({ queue, type: 'a', payload: { n: 1 } });
    await waitFor(async () => (await stateOf(id)) === 'dead', 15_000, 'the item dead');
    broken.now = false;
    const server = await startTestDashboard(scope, { ledger: tl.ledger, wake: tw.wake, adminToken: TOKEN });
    const { page, problems } = await openPage();

    await page.goto(`${server.url}/#/dead`);
    const group = page.locator(`tr[data-group="${queue}/a/upstream_refused"]`);
    await expect.poll(() => group.locator('td.num').textContent(), POLL).toBe('1');
    await group.getByRole('link', { name: id }).click();
    await page.locator('.why').waitFor();
    expect(await page.locator('.why').textContent()).toContain('dead');
    await page.getByRole('button', { name: 'Replay' }).click();
    await signIn(page);
    // The replay's page: a new item, which the consumer runs to completion.
    await page.waitForURL((u) => u.hash.startsWith('#/items/') && !u.hash.endsWith(id));
    const replayId = decodeURIComponent(new URL(page.url()).hash.slice('#/items/'.length));
    await page.locator('.page-head .sub .state-completed').waitFor();
    expect(await stateOf(replayId)).toBe('completed');
    expect((await tl.ledger.get(replayId))?.replayOf).toBe(id);
    expect(await page.locator('dl.fields').textContent()).toContain(id);
    expect(problems).toEqual([]);
  });

  test('a filter of dead items is replayed in bulk: the dry-run count, the confirmation, the result', async () => {
    const queue = uniqueQueue('dashbulk');
    const broken = { now: true };
    const { tw, producer } = await brokenConsumer(queue, broken);
    const made = await producer.enqueueMany([
      ...Array.from({ length: 3 }, (_, i) => ({ queue, type: 'a', payload: { i } })),
      { queue, type: 'b', payload: { other: true } },
    ]);
    await waitFor(
      async () => (await Promise.all(made.map((m) => stateOf(m.id)))).every((s) => s === 'dead'),
      15_000,
      'four dead items',
    );
    broken.now = false;
    const server = await startTestDashboard(scope, { ledger: tl.ledger, wake: tw.wake, adminToken: TOKEN });
    const { page, problems } = await openPage();

    await page.goto(`${server.url}/#/queues/${queue}?state=dead&type=a`);
    await expect.poll(() => page.locator('table.items tbody tr').count(), POLL).toBe(3);
    await page.getByRole('button', { name: 'Replay all matching…' }).click();
    await signIn(page);
    const dialog = page.getByRole('dialog', { name: 'Replay dead items' });
    await expect.poll(() => dialog.locator('.confirm-text').textContent(), POLL).toContain('Replay 3 dead items');
    await dialog.getByRole('button', { name: 'Confirm (3)' }).click();
    await expect.poll(() => dialog.locator('.result-text').textContent(), POLL).toBe('Replayed 3, skipped 0.');
    await waitFor(
      async () => {
        const done = await tl.ledger.operator.items({ queue, state: 'completed' });
        return done.items.length === 3 || undefined;
      },
      15_000,
      'the three replays completed',
    );
    // The item of the other type was not in the filter: still dead, not replayed.
    expect(await stateOf(made[3]!.id)).toBe('dead');
    expect((await tl.ledger.operator.items({ queue, state: 'completed', type: 'b' })).items).toEqual([]);
    expect(problems).toEqual([]);
  });

  test("a filter's purge counts first, honours the age chosen: nothing ended over a day ago, then all", async () => {
    const queue = uniqueQueue('dashpurge');
    const { tw, producer } = await brokenConsumer(queue, { now: true });
    const made = await producer.enqueueMany(
      Array.from({ length: 2 }, (_, i) => ({ queue, type: 'a', payload: { i } })),
    );
    await waitFor(
      async () => (await Promise.all(made.map((m) => stateOf(m.id)))).every((s) => s === 'dead'),
      15_000,
      'two dead items',
    );
    const server = await startTestDashboard(scope, { ledger: tl.ledger, wake: tw.wake, adminToken: TOKEN });
    const { page, problems } = await openPage();

    await page.goto(`${server.url}/#/queues/${queue}?state=dead`);
    await expect.poll(() => page.locator('table.items tbody tr').count(), POLL).toBe(2);
    await page.locator('select[name="purge-age"]').selectOption({ label: 'over a day ago' });
    await page.getByRole('button', { name: 'Purge dead…' }).click();
    await signIn(page);
    const dialog = page.getByRole('dialog', { name: 'Purge dead items' });
    await expect
      .poll(() => dialog.locator('.confirm-text').textContent(), POLL)
      .toBe(`No dead item in queue ${queue} that ended over a day ago.`);
    expect(await dialog.getByRole('button', { name: 'Confirm (0)' }).isDisabled()).toBe(true);
    await dialog.getByRole('button', { name: 'Cancel' }).click();
    await page.locator('select[name="purge-age"]').selectOption({ label: 'any age' });
    await page.getByRole('button', { name: 'Purge dead…' }).click();
    await expect.poll(() => dialog.locator('.confirm-text').textContent(), POLL).toContain('Delete 2 dead items');
    await dialog.getByRole('button', { name: 'Confirm (2)' }).click();
    await expect.poll(() => dialog.locator('.result-text').textContent(), POLL).toBe('Purged 2.');
    expect(await Promise.all(made.map((m) => stateOf(m.id)))).toEqual([undefined, undefined]);
    expect(problems).toEqual([]);
  });

  test('pausing a queue from the page stops its claims; items enqueued meanwhile wait until resume', async () => {
    const queue = uniqueQueue('dashpause');
    const { tw, consumer, started, producer } = await brokenConsumer(queue, { now: false });
    const server = await startTestDashboard(scope, { ledger: tl.ledger, wake: tw.wake, adminToken: TOKEN });
    const { page, problems } = await openPage();
    await page.goto(`${server.url}/#/`);
    const row = page.locator(`tr[data-queue="${queue}"]`);
    // A queue shows once it has items: one that runs before the pause.
    const first = await producer.enqueue({ queue, type: 'a', payload: { before: true } });
    await waitFor(async () => (await stateOf(first.id)) === 'completed', 15_000, 'the first item done');
    await row.getByRole('button', { name: 'Pause' }).click();
    await signIn(page);
    await row.locator('.badge.paused').waitFor();
    expect(await tl.ledger.pausedQueues([queue])).toEqual(new Set([queue]));

    const later = await producer.enqueueMany(
      Array.from({ length: 3 }, (_, i) => ({ queue, type: 'a', payload: { i } })),
    );
    const sweeps = consumer.counters.sweeps;
    await waitFor(() => consumer.counters.sweeps >= sweeps + 2 || undefined, 15_000, 'two sweeps after the enqueue');
    expect(started).toEqual([first.id]);
    for (const m of later) expect(await stateOf(m.id)).toBe('pending');
    await expect.poll(() => row.locator('td.num').first().textContent(), POLL).toBe('3');

    await row.getByRole('button', { name: 'Resume' }).click();
    await waitFor(() => started.length === 4 || undefined, 15_000, 'the three run after resume');
    await row.locator('.badge.paused').waitFor({ state: 'detached' });
    expect(new Set(started.slice(1))).toEqual(new Set(later.map((m) => m.id)));
    expect(problems).toEqual([]);
  });

  test('without a token the dashboard is read-only: no action buttons, and a POST is refused with 403', async () => {
    const queue = uniqueQueue('dashro');
    const { tw, producer } = await brokenConsumer(queue, { now: true });
    const { id } = await producer.enqueue({ queue, type: 'a', payload: {} });
    await waitFor(async () => (await stateOf(id)) === 'dead', 15_000, 'the item dead');
    const server = await startTestDashboard(scope, { ledger: tl.ledger, wake: tw.wake });
    const { page, problems } = await openPage();

    await page.goto(`${server.url}/#/`);
    await page.locator(`tr[data-queue="${queue}"]`).waitFor();
    expect(await page.locator('.mode').textContent()).toBe('read-only');
    expect(await page.getByRole('button').count()).toBe(0);
    await page.goto(`${server.url}/#/items/${id}`);
    await page.locator('.why').waitFor();
    expect(await page.getByRole('button').count()).toBe(0);
    await page.goto(`${server.url}/#/dead`);
    await page.locator(`tr[data-group^="${queue}/"]`).waitFor();
    expect(await page.getByRole('button').count()).toBe(0);

    const status = await page.evaluate(
      async ([q, token]) =>
        (
          await fetch(`/api/queues/${q}/pause`, {
            method: 'POST',
            headers: { 'content-type': 'application/json', 'x-lanewake-admin-token': token },
            body: '{}',
          })
        ).status,
      [queue, TOKEN] as const,
    );
    expect(status).toBe(403);
    expect(await tl.ledger.pausedQueues([queue])).toEqual(new Set());
    expect(problems).toEqual([]);
  });
});
