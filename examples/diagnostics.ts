import { once } from 'node:events';
import { Consumer, Ledger, Producer, WakeChannel, type ClaimRoundMessage } from 'lanewake';

const ledger = new Ledger({ url: process.env.LANEWAKE_DATABASE_URL ?? 'mysql://root@127.0.0.1:3306/app' });
await ledger.migrate({ createDatabase: true });
const wake = new WakeChannel({ redis: process.env.LANEWAKE_REDIS_URL ?? 'redis://127.0.0.1:6379' });

// #region operations
import { subscribe } from 'node:diagnostics_channel';
subscribe('lanewake:claim-round', (m) => console.log((m as ClaimRoundMessage).claimed.length, 'claimed'));
// #endregion operations

const consumer = new Consumer({ ledger, wake, queue: 'mail', handlers: { 'mail.ping': async () => ({ pong: true }) } });
await consumer.start();
const ended = once(consumer, 'outcome');
await new Producer({ ledger, wake }).enqueue({ queue: 'mail', type: 'mail.ping', payload: {} });
await ended;
await consumer.stop();
await Promise.all([wake.close(), ledger.close()]);
