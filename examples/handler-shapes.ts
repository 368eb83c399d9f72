import { once } from 'node:events';
import {
  Consumer,
  Ledger,
  Producer,
  WakeChannel,
  defineBatchHandler,
  defineHandler,
  type BatchOutcomes,
  type Job,
} from 'lanewake';

const ledger = new Ledger({ url: process.env.LANEWAKE_DATABASE_URL ?? 'mysql://root@127.0.0.1:3306/app' });
await ledger.migrate({ createDatabase: true });
const wake = new WakeChannel({ redis: process.env.LANEWAKE_REDIS_URL ?? 'redis://127.0.0.1:6379' });
const producer = new Producer({ ledger, wake });

const syncToCrm = async (job: Job<{ entity: string }>) => ({ synced: job.payload.entity });
const indexMany = async (jobs: Job<{ doc: string }>[]): Promise<BatchOutcomes> =>
  Object.fromEntries(jobs.map((j) => [j.id, { outcome: 'complete', result: { indexed: j.payload.doc } }]));
const listFiles = async (repo: string) => [`${repo}/README.md`];
const callPartner = async (job: Job<{ partner: string }>) => ({ called: job.payload.partner });

const consumer = new Consumer({
  ledger,
  wake,
  queue: 'sync',
  // #region readme
  handlers: {
    'entity.sync': defineHandler({ coalesce: 'latest', handle: syncToCrm }),
    'search.index': defineBatchHandler({ batch: { max: 50, maxWaitMs: 200 }, handle: indexMany }),
    'repo.sync': async (job: Job<{ repo: string }>, ctx) => {
      await ctx.step('list', () => listFiles(job.payload.repo));
      ctx.progress(50);
    },
    'partner.call': defineHandler({ rateLimit: { key: (p) => p.partner, max: 20, perMs: 1000 }, handle: callPartner }),
  },
  // #endregion readme
});

const outcomes: string[] = [];
consumer.on('outcome', (item, outcome) => outcomes.push(`${item.type} ${outcome}`));
await consumer.start();
await producer.enqueue({ queue: 'sync', type: 'entity.sync', lane: 'entity:1', payload: { entity: 'e1' } });
await producer.enqueue({ queue: 'sync', type: 'search.index', payload: { doc: 'd1' } });
await producer.enqueue({ queue: 'sync', type: 'repo.sync', payload: { repo: 'lanewake' } });
await producer.enqueue({ queue: 'sync', type: 'partner.call', payload: { partner: 'acme' } });
while (outcomes.length < 4) await once(consumer, 'outcome');
console.log(outcomes.sort().join('\n'));
await consumer.stop();
await Promise.all([wake.close(), ledger.close()]);
