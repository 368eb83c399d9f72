/**
 * The README's first command until the full demo exists: migrate a local
 * ledger, enqueue a few items over lanes, and drive them through claim,
 * retry, complete and dead-letter, printing what the ledger did.
 */
import { ensureDatabase } from '../ledger/connection.js';
import { Ledger } from '../ledger/ledger.js';

const url = process.env.LANEWAKE_DATABASE_URL ?? 'mysql://root@127.0.0.1:3306/lanewake_demo';
const queue = `roundtrip-${Date.now().toString(36)}`;

async function main(): Promise<void> {
  await ensureDatabase(url);
  const ledger = new Ledger({ url });
  try {
    const migrated = await ledger.migrate();
    console.log(`ledger ${url}: schema v${migrated.to} (applied ${migrated.applied.length ? migrated.applied.join(', ') : 'nothing, already current'})`);

    const items = [];
    for (let order = 1; order <= 3; order++) {
      for (const customer of ['alice', 'bob']) items.push({ queue, type: 'invoice.send', lane: `customer:${customer}`, payload: { customer, order } });
    }
    items.push({ queue, type: 'report.build', payload: { month: '2026-11' }, maxAttempts: 2 });
    const enqueued = await ledger.enqueueMany(items);
    const again = await ledger.enqueue({ queue, type: 'report.build', payload: {}, idempotencyKey: 'nightly' });
    const dup = await ledger.enqueue({ queue, type: 'report.build', payload: {}, idempotencyKey: 'nightly' });
    console.log(`enqueued ${enqueued.length} items in one batch; idempotency key 'nightly' → ${again.id} then ${dup.id} (duplicate: ${dup.duplicate})`);

    const order: string[] = [];
    for (let round = 1; ; round++) {
      const { items: claimed } = await ledger.claim({ queue, owner: 'roundtrip', limit: 16, leaseMs: 30_000 });
      if (claimed.length === 0) break;
      console.log(`round ${round}: claimed ${claimed.length} lane heads`);
      for (const item of claimed) {
        const p = item.payload as { customer?: string; order?: number };
        if (item.type === 'report.build' && item.attempt < item.maxAttempts && p.customer === undefined && item.idempotencyKey === null) {
          const r = await ledger.retry(item, { error: new Error('report store busy'), delayMs: 0 });
          console.log(`  ${item.id} ${item.type} attempt ${item.attempt}: failed, ${r.state}`);
        } else if (item.type === 'report.build' && item.idempotencyKey === null) {
          const r = await ledger.fail(item, { error: 'report template missing' });
          console.log(`  ${item.id} ${item.type} attempt ${item.attempt}: permanent failure, ${r.state}`);
        } else {
          const r = await ledger.complete(item, { sent: true });
          if (p.customer) order.push(`${p.customer}#${p.order}`);
          console.log(`  ${item.id} ${item.type} ${item.lane ?? '(own lane)'} #${item.laneSeq ?? '-'}: ${r.won ? 'completed' : 'lost'}`);
        }
      }
    }
    console.log(`completion order per lane: ${order.join(' ')}`);
    const [stats] = await ledger.stats(queue);
    console.log('final counts:', JSON.stringify(stats?.counts));
    const dead = await ledger.listDead({ queue });
    for (const d of dead) {
      const history = await ledger.inspect(d.id);
      console.log(`dead letter ${d.id}: class ${d.failureClass}, ${history?.attempts.length ?? 0} attempts recorded`);
    }
    await ledger.purge({ olderThanMs: 0, queue });
  } finally {
    await ledger.close();
  }
}

main().catch((error: unknown) => {
  console.error(error);
  process.exit(1);
});
