// npm run docs:screenshots: seeds a demo ledger (scripts/dashboard-demo.ts) with real consumers, serves the
// dashboard on it and saves a screenshot of each page into docs/dashboard/*.png. Needs MariaDB and Redis
// (LANEWAKE_DATABASE_URL without a database, default mysql://root@127.0.0.1:3306; LANEWAKE_REDIS_URL, default
// redis://127.0.0.1:6379) and chromium (/usr/bin/chromium). The database and Redis keys it makes are dropped at
// the end. DEMO_SECONDS (default 240: the charts show minutes) is how long the workload runs
// before the pictures are taken.
import { mkdir } from 'node:fs/promises';
import { randomBytes } from 'node:crypto';
import { Redis } from 'ioredis';
import { createConnection } from 'mysql2/promise';
import type { Page } from 'playwright-core';
import { Ledger } from '../src/ledger/ledger.js';
import { setDefaultLogLevel } from '../src/log.js';
import { WakeChannel } from '../src/wake/wake-channel.js';
import { launchChromium } from '../test/support/browser.js';
import { demoDatabaseName, startDemoWorkload } from './dashboard-demo.js';
import { startDemoServer } from './dashboard-server.js';

const OUT = new URL('../docs/dashboard/', import.meta.url);
const TOKEN = 'demo-token';
const serverUrl = (process.env.LANEWAKE_DATABASE_URL ?? 'mysql://root@127.0.0.1:3306').replace(/\/$/, '');
const redisUrl = process.env.LANEWAKE_REDIS_URL ?? 'redis://127.0.0.1:6379';
const seconds = Number(process.env.DEMO_SECONDS ?? 240);

async function admin(sql: string): Promise<void> {
  const c = await createConnection(serverUrl);
  try {
    await c.query(sql);
  } finally {
    await c.end();
  }
}

async function deleteKeys(prefix: string): Promise<void> {
  const r = new Redis(redisUrl, { maxRetriesPerRequest: 1 });
  try {
    let cursor = '0';
    do {
      const [next, keys] = await r.scan(cursor, 'MATCH', `${prefix}*`, 'COUNT', 500);
      cursor = next;
      if (keys.length > 0) await r.del(...keys);
    } while (cursor !== '0');
  } finally {
    r.disconnect();
  }
}

async function shoot(
  page: Page,
  base: string,
  hash: string,
  file: string,
  ready: string,
  fullPage = true,
): Promise<void> {
  await page.goto(`${base}/${hash}`);
  await page.locator(ready).first().waitFor();
  await page.screenshot({ path: new URL(file, OUT).pathname, fullPage });
  console.log(`docs/dashboard/${file}`);
}

async function firstId(base: string, path: string): Promise<string> {
  const page = (await (await fetch(`${base}${path}`)).json()) as { items: { id: string }[] };
  const id = page.items[0]?.id;
  if (id === undefined) throw new Error(`no item at ${path}`);
  return id;
}

async function main(): Promise<void> {
  setDefaultLogLevel('error');
  const database = demoDatabaseName();
  const keyPrefix = `lwdemo:${randomBytes(4).toString('hex')}:`;
  await admin(`CREATE DATABASE \`${database}\``);
  const ledger = new Ledger({ url: `${serverUrl}/${database}`, poolSize: 12 });
  const wake = new WakeChannel({ redis: redisUrl, keyPrefix });
  const stops: (() => Promise<unknown>)[] = [];
  try {
    await ledger.migrate();
    const demo = await startDemoWorkload(ledger, wake);
    stops.push(() => demo.stop());
    console.log(`running the demo workload for ${seconds} s…`);
    await demo.run(seconds * 1000);
    await demo.pauseBilling();
    await demo.run(3_000);

    const server = await startDemoServer({ ledger, wake, adminToken: TOKEN });
    stops.push(() => server.close());
    await mkdir(OUT, { recursive: true });
    const browser = await launchChromium();
    stops.push(() => browser.close());
    const context = await browser.newContext({ viewport: { width: 1400, height: 860 } });
    // Signed in, as an operator would be after the first action's prompt.
    await context.addInitScript({
      content:
        `sessionStorage.setItem('lanewake.adminToken', ${JSON.stringify(TOKEN)}); ` +
        `sessionStorage.setItem('lanewake.actor', 'ops-demo');`,
    });
    const page = await context.newPage();
    const base = server.url;

    await shoot(page, base, '#/', 'queues.png', 'table.queues tbody tr');
    await shoot(page, base, '#/queues/emails', 'items.png', 'table.items tbody tr', false);
    await shoot(page, base, '#/queues/billing?state=dead', 'items-dead.png', 'table.items tbody tr', false);
    const deadCharge = await firstId(base, '/api/queues/billing/items?state=dead&limit=1');
    await shoot(page, base, `#/items/${deadCharge}`, 'item-dead.png', '.why');
    const report = await firstId(base, '/api/queues/reports/items?state=completed&limit=1');
    await shoot(page, base, `#/items/${report}`, 'item-steps.png', '.why');
    await shoot(page, base, '#/queues/billing/lanes', 'lanes.png', 'table.lanes tbody tr');
    await shoot(page, base, '#/queues/emails/lanes/list-weekly', 'lane.png', 'table.items tbody tr');
    await shoot(page, base, '#/dead', 'dead.png', 'table.dead tbody tr');

    await page.locator('tr[data-group^="billing/"]').getByRole('button', { name: 'Replay all…' }).click();
    await page.locator('.dialog .confirm-text').waitFor();
    await page.screenshot({ path: new URL('replay-confirm.png', OUT).pathname });
    console.log('docs/dashboard/replay-confirm.png');
  } finally {
    for (const stop of stops.reverse()) await stop().catch((e: unknown) => console.error(e));
    await wake.close().catch(() => undefined);
    await ledger.close().catch(() => undefined);
    await deleteKeys(keyPrefix).catch(() => undefined);
    await admin(`DROP DATABASE IF EXISTS \`${database}\``);
  }
}

await main();
