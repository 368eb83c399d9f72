import type { Executor } from '../../connection.js';
import type { LedgerTables } from '../../tables.js';
import { admitStatement, admittedKeys, grantedByKey, grantedRead } from '../keys/admission.js';
import { storedKey } from '../keys/scope.js';
import { queueScoped } from '../common/fragments.js';
import type { NewItem } from './new-item.js';

export type KeyAdmission = { head: boolean };

/** Each keyed item's priority as enqueued, before a fair queue's round raised it. */
const givenPriority = new WeakMap<NewItem, number>();

/**
 * Admits the keyed items and deals their rounds (sql/keys/admission.ts): the
 * key rows are upserted (locking them) and read back. The first `granted`
 * laneless items of each key in the batch are heads; one that is not loses
 * any claim it was offered. In a fair queue each keyed item's priority is
 * raised by its round. A laned item keeps the place its lane gave it.
 */
export async function admitKeyed(
  exec: Executor,
  t: LedgerTables,
  items: readonly NewItem[],
): Promise<(KeyAdmission | undefined)[]> {
  const keys = await admittedKeys(exec, t, items);
  if (keys.length === 0) return items.map(() => undefined);
  await admitStatement(t, keys).execute(exec);
  return admissionsOf(items, (await grantedRead(t, keys).execute(exec)).rows as Record<string, unknown>[]);
}

/**
 * What the admission granted each keyed item, from the key rows' read-back
 * (grantedRead): the first `granted` laneless items of each key in the
 * batch are heads; one that is not loses any claim it was offered. In a
 * fair queue each keyed item's priority is raised by its round. A laned
 * item keeps the place its lane gave it (undefined, as an item without a key).
 */
export function admissionsOf(
  items: readonly NewItem[],
  grantedRows: readonly Record<string, unknown>[],
): (KeyAdmission | undefined)[] {
  const granted = grantedByKey(grantedRows);
  const seen = new Map<string, { all: number; laneless: number }>();
  return items.map((item) => {
    const key = storedKey(item);
    if (key === null) return undefined;
    const k = queueScoped(item.queue, key);
    const place = seen.get(k) ?? { all: 0, laneless: 0 };
    place.all++;
    if (item.lane === null) place.laneless++;
    seen.set(k, place);
    const g = granted.get(k);
    if (g?.roundFrom !== null && g?.roundFrom !== undefined) {
      // From the priority it was given: a transaction run again after a conflict deals the rounds again.
      const base = givenPriority.get(item) ?? item.priority;
      givenPriority.set(item, base);
      item.priority = base + g.roundFrom + place.all - 1;
    }
    if (item.lane !== null) return undefined;
    const head = place.laneless <= (g?.granted ?? 0);
    if (!head) delete item.claim;
    return { head };
  });
}
