import { sql } from 'kysely';
import { afterEach, expect, test } from 'vitest';
import { createLogger } from '../src/log.js';
import { ScheduleFirer } from '../src/schedules/firer.js';
import { uniqueQueue } from './support/engine.js';
import { createTestLedger, type TestLedger } from './support/ledger.js';
import { lanewake } from './support/cli.js';
import { firedItems } from './support/schedule-replicas.js';

// A test's own database: TiDB's DDL under load takes tens of seconds to make one.
let tl: TestLedger | undefined;
afterEach(async () => {
  await tl?.drop();
  tl = undefined;
});

test('lanewake schedules lists them with their next fire, pauses, resumes ' +
  "and removes one; inspect --why names a fired item's schedule", async () => {
  tl = await createTestLedger();
  const cli = (...args: string[]) => lanewake(['--database-url', tl!.url, ...args]);
  const queue = uniqueQueue('sched-cli');
  const name = `${queue}-nightly`;
  expect((await cli('schedules')).out.trim()).toBe('no schedules');
  await tl.ledger.schedules.upsert({
    name,
    pattern: '0 3 * * *',
    tz: 'Europe/Paris',
    item: { queue, type: 'report', payload: {} },
  });
  await tl.ledger.schedules.upsert({
    name: `${queue}-tick`,
    everyMs: 60_000,
    backfillMs: 3_600_000,
    item: { queue, type: 'tick', payload: {} },
  });
  const listed = await cli('schedules');
  expect(listed.code).toBe(0);
  const lines = listed.out.trim().split('\n');
  expect(lines[0]).toMatch(/^NAME\s+SOURCE\s+TIMING\s+QUEUE\/TYPE\s+NEXT FIRE\s+DUE\s+LAST FIRE\s+FIRES\s+MISSED$/);
  const next = (await tl.ledger.schedules.get(name))!.nextFireAt.toISOString();
  expect(lines[1]).toMatch(
    new RegExp(
      `^${name}\\s+api\\s+cron 0 3 \\* \\* \\* ` +
        `\\(Europe/Paris\\)\\s+${queue}/report\\s+${next}\\s+in \\S+\\s+-\\s+0\\s+skip$`,
    ),
  );
  expect(lines[2]).toMatch(/every 1m00s .* backfill 1h00m$/);

  expect((await cli('schedules', 'pause', name)).out.trim()).toBe(`schedule ${name}: paused`);
  expect((await tl.ledger.schedules.get(name))?.paused).toBe(true);
  expect((await cli('schedules')).out).toMatch(new RegExp(`${name}\\s+api\\s+.*\\s+paused\\s+-`));
  expect((await cli('schedules', 'resume', name)).code).toBe(0);
  expect((await tl.ledger.schedules.get(name))?.paused).toBe(false);

  // A fire, then what inspect --why says of its item.
  const fireTime = Date.parse(next) - 86_400_000;
  await sql`UPDATE ${tl.ledger.tables.schedules}
    SET next_fire_at = ${new Date(fireTime)}, backfill_ms = ${2 * 86_400_000} WHERE name = ${name}`.execute(
    tl.ledger.db,
  );
  await new ScheduleFirer({ ledger: tl.ledger, log: createLogger('test') }).pass();
  const [fired] = await firedItems(tl.ledger, queue, name);
  expect(fired?.fireMs).toBe(fireTime);
  const item = await tl.ledger.operator.items({ queue, idempotencyKey: fired!.key });
  const id = item.items[0]!.id;
  const why = await cli('inspect', id, '--why');
  expect(why.out).toContain(`it was enqueued by schedule ${name}'s fire of ${new Date(fireTime).toISOString()}`);
  expect(why.out).toContain(`  schedule: ${name}`);
  const whyJson = JSON.parse((await cli('--json', 'inspect', id, '--why')).out) as { schedule?: { name: string } };
  expect(whyJson.schedule?.name).toBe(name);

  expect((await cli('schedules', 'remove', name)).out.trim()).toBe(`schedule ${name}: removed`);
  const again = await cli('schedules', 'remove', name);
  expect(again.code).toBe(1);
  expect(again.err).toContain(`schedule ${name} not found`);
  expect((await cli('schedules', 'explode', name)).code).toBe(2);
  expect((await cli('schedules', 'pause')).code).toBe(2);
  const bad = await cli('schedules', 'pause', 'bad name!');
  expect(bad.code).toBe(2);
  expect(bad.err).toContain('<name>');
  expect((await tl.ledger.schedules.list()).map((s) => s.name)).toEqual([`${queue}-tick`]);
}, 240_000);
