import type { Ledger } from '../../src/ledger/ledger.js';
import type { Explanation } from '../../src/ledger/operator-types.js';
import type { ConsumerRow } from '../../src/ledger/sql/fleet/consumers.js';
import type { QueueClass } from '../../src/ledger/types.js';

let beats = 0;

/** A consumer's heartbeat row, as a running consumer writes it; its name starts with `prefix`. */
export async function liveConsumer(
  ledger: Ledger,
  prefix: string,
  queue: string,
  opts: Partial<ConsumerRow> = {},
): Promise<string> {
  const name = `${prefix}-${++beats}`;
  const classes: QueueClass[] = ['interactive', 'default', 'bulk'];
  await ledger.consumerBeat(
    [{ name, queue, classes, types: null, concurrency: 4, maxProcessing: null, epoch: null, version: 'test', ...opts }],
    true,
  );
  return name;
}

/** The ledger's explanation of an item that must exist. */
export async function explained(ledger: Ledger, id: string): Promise<Explanation> {
  const e = await ledger.explain(id);
  if (!e) throw new Error(`no item ${id}`);
  return e;
}
