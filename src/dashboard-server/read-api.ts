import type { Ledger } from '../ledger/ledger.js';
import { summaryOfItem } from '../ledger/rows.js';
import type { ItemState } from '../ledger/types.js';
import { badRequest, HttpError } from './http.js';
import type { Route, RouteContext } from './routes.js';

/**
 * The dashboard's read API (GET, JSON, no side effects): the contract is in
 * docs/operations/observing.md, "The dashboard". Every list is a bounded read of the
 * ledger (src/ledger/operator.ts).
 */
export const READ_ROUTES: readonly Route[] = [
  {
    method: 'GET',
    pattern: ['session'],
    run: async (c) => ({
      canAct: c.options.adminToken !== undefined,
      showPayloads: c.options.showPayloads === true,
      version: c.options.version,
    }),
  },
  { method: 'GET', pattern: ['queues'], run: (c) => c.backend.ledger.operator.queues() },
  { method: 'GET', pattern: ['consumers'], run: (c) => c.backend.ledger.liveConsumers() },
  {
    method: 'GET',
    pattern: ['queues', ':', 'items'],
    run: (c) =>
      c.backend.ledger.operator.items(
        {
          queue: c.params[0] ?? '',
          state: optional(c, 'state') as ItemState | undefined,
          type: optional(c, 'type'),
          lane: optional(c, 'lane'),
          key: optional(c, 'key'),
          idempotencyKey: optional(c, 'idempotencyKey'),
          id: optional(c, 'id'),
        },
        { after: optional(c, 'after'), limit: integer(c, 'limit') },
      ),
  },
  {
    method: 'GET',
    pattern: ['queues', ':', 'lanes'],
    run: async (c) => ({ lanes: await c.backend.ledger.operator.lanes(c.params[0] ?? '', integer(c, 'limit')) }),
  },
  {
    method: 'GET',
    pattern: ['queues', ':', 'lanes', ':', 'items'],
    run: (c) =>
      c.backend.ledger.operator.laneItems(c.params[0] ?? '', c.params[1] ?? '', {
        after: optional(c, 'after'),
        limit: integer(c, 'limit'),
      }),
  },
  {
    method: 'GET',
    pattern: ['schedules'],
    run: (c) => scheduleList(c.backend.ledger, c.options.showPayloads === true),
  },
  {
    method: 'GET',
    pattern: ['dead'],
    run: async (c) => ({ groups: await c.backend.ledger.operator.deadGroups(optional(c, 'queue')) }),
  },
  {
    method: 'GET',
    pattern: ['items', ':'],
    run: async (c) => {
      const id = c.params[0] ?? '';
      const found = await itemDetail(c.backend.ledger, id, c.options.showPayloads === true);
      if (found === undefined) throw new HttpError(404, { error: `no item ${id}` });
      return found;
    },
  },
];

/** A query parameter, undefined when absent or empty. */
function optional(c: RouteContext, name: string): string | undefined {
  const v = c.query.get(name);
  return v === null || v === '' ? undefined : v;
}

function integer(c: RouteContext, name: string): number | undefined {
  const v = optional(c, name);
  if (v === undefined) return undefined;
  if (!/^\d{1,9}$/.test(v)) throw badRequest(name, 'must be a whole number');
  return Number(v);
}

/**
 * `/api/items/<id>`: the item (its payload only when the server shows
 * payloads), its attempts, steps, coalesced group and why it is where it is.
 */
export async function itemDetail(
  ledger: Pick<Ledger, 'inspect' | 'explain' | 'operator'>,
  id: string,
  showPayloads: boolean,
): Promise<unknown> {
  const found = await ledger.inspect(id);
  if (!found) return undefined;
  const [why, group] = await Promise.all([ledger.explain(id), ledger.operator.group(id)]);
  const w = found.item;
  const item = {
    ...summaryOfItem(w),
    ...(showPayloads ? { payload: w.payload } : {}),
    result: w.result,
    progress: w.progress,
    checkpoint: w.checkpoint,
    groupHead: w.groupHead,
    dependencyKey: w.dependencyKey,
    leaseOwner: w.leaseOwner,
    leaseUntil: w.leaseUntil,
    replayOf: w.replayOf,
    cancelRequested: w.cancelRequested,
  };
  return { item, attempts: found.attempts, steps: found.steps, group, why };
}

/**
 * `/api/schedules`: every recurring schedule with its next fire (items' payloads only when the server shows
 * payloads), and the ledger's now.
 */
export async function scheduleList(ledger: Pick<Ledger, 'schedules' | 'now'>, showPayloads: boolean): Promise<unknown> {
  const [schedules, now] = await Promise.all([ledger.schedules.list(), ledger.now()]);
  return {
    now,
    schedules: schedules.map((s) => {
      const { payload, ...item } = s.item;
      return { ...s, item: showPayloads ? { ...item, payload } : item };
    }),
  };
}
