import { Consumer, Ledger, Producer, WakeChannel, type Job, type JobContext } from 'lanewake';

const ledger = new Ledger({ url: process.env.LANEWAKE_DATABASE_URL ?? 'mysql://root@127.0.0.1:3306/app' });
await ledger.migrate({ createDatabase: true });
const wake = new WakeChannel({ redis: process.env.LANEWAKE_REDIS_URL ?? 'redis://127.0.0.1:6379' });
const producer = new Producer({ ledger, wake });
const day = '2026-12-07';

const step = async (job: Job<{ day: string }>) => ({ [job.type]: job.payload.day });
// #region fan-in
const report = async (_job: Job<{ day: string }>, ctx: JobContext) => {
  const { dependencies } = await ctx.dependencies(); // a page: name, id, end state, result
  return dependencies.map((d) => `${d.name}:${d.state}`).sort();
};
// #endregion fan-in
const consumer = new Consumer({
  ledger,
  wake,
  queue: 'reports',
  handlers: { fetch: step, totals: step, charts: step, report },
});
await consumer.start();
const done = new Promise<unknown>((resolve) =>
  consumer.on('outcome', (item, outcome) => {
    if (item.type === 'report') resolve(outcome);
  }),
);

// #region readme
const flow = await producer.workflow({
  queue: 'reports',
  key: `nightly:${day}`, // enqueued once per key, all jobs or none
  jobs: {
    fetch: { type: 'fetch', payload: { day } },
    totals: { type: 'totals', payload: { day }, after: ['fetch'] },
    charts: { type: 'charts', payload: { day }, after: ['fetch'] },
    report: { type: 'report', payload: { day }, after: ['totals', 'charts'] },
  },
});
// #endregion readme
console.log(await done, (await ledger.get(flow.jobs.report!))?.result);
await consumer.stop();
await Promise.all([wake.close(), ledger.close()]);
