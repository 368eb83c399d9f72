import { afterEach, expect, test } from 'vitest';
import { WakeChannel } from '../src/wake/wake-channel.js';
import { captureLog } from './support/captured-log.js';
import { waitFor } from './support/ledger.js';
import { PrivateRedis } from './support/processes.js';

// A Redis outage under load must read as two lines (down, back), not one per publish.

let redis: PrivateRedis | undefined;
let wake: WakeChannel | undefined;
afterEach(async () => {
  await wake?.close().catch(() => undefined);
  await redis?.destroy();
  wake = undefined;
  redis = undefined;
});

test('an outage logs one line when publishing fails and one when it works again, failures counted', async () => {
  redis = await PrivateRedis.start();
  const log = captureLog('info');
  wake = new WakeChannel({ redis: redis.url, keyPrefix: 'lwt:outage:', logger: log.logger });
  const wakeUp = { queue: 'q', queueClass: 'default' as const, kind: 'enqueue' as const, ids: ['a'] };
  expect(await wake.publish([wakeUp])).toBe(true);
  expect(log.lines).toEqual([]);

  await redis.kill();
  await waitFor(() => !wake!.connected() || undefined, 10_000, 'the channel to see Redis gone');
  const failures = { wake: 60, control: 20, timers: 20 };
  for (let i = 0; i < failures.wake; i++) expect(await wake.publish([wakeUp])).toBe(false);
  for (let i = 0; i < failures.control; i++) expect(await wake.publishControl('q', { type: 'pause' })).toBe(false);
  for (let i = 0; i < failures.timers; i++) {
    expect(
      await wake.scheduleTimers([
        { queue: 'q', queueClass: 'default', itemId: `t${i}`, attempt: 0, runAt: new Date(Date.now() + 60_000) },
      ]),
    ).toBe(false);
  }
  const total = failures.wake + failures.control + failures.timers;
  expect(wake.publishFailures).toBe(total);
  expect(log.lines).toHaveLength(1);
  expect(log.lines[0]).toMatchObject({ level: 40, msg: expect.stringMatching(/redis publish failing/) });

  await redis.start();
  // Publishes keep failing until the client has reconnected: those count too.
  let failedWhileReconnecting = 0;
  await waitFor(
    async () => (await wake!.publish([wakeUp])) || (failedWhileReconnecting++, undefined),
    15_000,
    'a publish to succeed again',
  );
  const back = log.lines.slice(1);
  expect(back).toHaveLength(1);
  const counted = total + failedWhileReconnecting;
  expect(wake.publishFailures).toBe(counted);
  expect(back[0]).toMatchObject({ level: 40, failedWhileDown: counted, publishFailures: counted });
  expect(back[0]?.msg).toMatch(/back|again/i);
  expect(log.lines).toHaveLength(2);
});
