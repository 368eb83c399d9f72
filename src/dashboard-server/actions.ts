import { createHash, timingSafeEqual } from 'node:crypto';
import type { IncomingMessage } from 'node:http';
import { RepairRejectedError, ReplayRejectedError } from '../errors.js';
import type { DeadFilter, PurgeFilter } from '../ledger/operator-types.js';
import { Producer } from '../producer/producer.js';
import { badRequest, HttpError, readJsonObject } from './http.js';
import type { Route, RouteContext } from './routes.js';

export const TOKEN_HEADER = 'x-lanewake-admin-token';
export const ACTOR_HEADER = 'x-lanewake-actor';

/** What one action did, for its audit line. */
interface Done {
  answer: unknown;
  queue?: string | undefined;
  id?: string | undefined;
  filter?: Record<string, unknown> | undefined;
  count: number;
}

/**
 * An action (POST) behind the dashboard's rules: 403 on a read-only server,
 * 401 without the right token (compared in constant time), 415 unless the
 * body is declared JSON (an HTML form from another site cannot send it, nor
 * the token header). Each action that ran logs one info line: who (the
 * x-lanewake-actor header), from where, what, on which items, how many.
 */
function action(
  name: string,
  pattern: readonly string[],
  act: (c: RouteContext, body: Record<string, unknown>) => Promise<Done>,
): Route {
  return {
    method: 'POST',
    pattern,
    run: async (c) => {
      authorize(c.req, c.options.adminToken);
      const body = await readJsonObject(c.req);
      const who = { actor: actorOf(c.req), remote: c.req.socket.remoteAddress, action: name };
      let done: Done;
      try {
        done = await act(c, body);
      } catch (error) {
        // A refused action (the item moved on, or is not there) is logged too: someone tried it.
        if (error instanceof HttpError && (error.status === 404 || error.status === 409)) {
          c.log.info({ ...who, id: c.params[0], count: 0, refused: error.message }, 'admin action');
        }
        throw error;
      }
      c.log.info({ ...who, queue: done.queue, id: done.id, filter: done.filter, count: done.count }, 'admin action');
      return done.answer;
    },
  };
}

function authorize(req: IncomingMessage, token: string | undefined): void {
  if (token === undefined) throw new HttpError(403, { error: 'read-only: start with --admin-token' });
  const given = req.headers[TOKEN_HEADER];
  if (typeof given !== 'string' || !sameSecret(given, token))
    throw new HttpError(401, { error: `missing or wrong ${TOKEN_HEADER}` });
  const type = (req.headers['content-type'] ?? '').split(';')[0]?.trim().toLowerCase();
  if (type !== 'application/json') throw new HttpError(415, { error: 'actions take content-type: application/json' });
}

/** Equal in constant time whatever the lengths (both are hashed first). */
function sameSecret(a: string, b: string): boolean {
  const digest = (s: string): Buffer => createHash('sha256').update(s, 'utf8').digest();
  return timingSafeEqual(digest(a), digest(b));
}

function actorOf(req: IncomingMessage): string {
  const v = req.headers[ACTOR_HEADER];
  const name =
    typeof v === 'string'
      ? v
          .replace(/[^\x20-\x7e]/g, '?')
          .slice(0, 64)
          .trim()
      : '';
  return name === '' ? 'anonymous' : name;
}

function producerOf(c: RouteContext): Producer {
  return new Producer({ ledger: c.backend.ledger, wake: c.backend.wake });
}

function dryRunOf(body: Record<string, unknown>): boolean {
  if (typeof body.dryRun !== 'boolean') throw badRequest('dryRun', 'must be true or false');
  return body.dryRun;
}

/** The body's fields but dryRun, for the ledger to check (an unknown field is named as a bad one). */
function filterOf(body: Record<string, unknown>): Record<string, unknown> {
  const { dryRun: _dryRun, ...filter } = body;
  return filter;
}

export const ACTION_ROUTES: readonly Route[] = [
  action('replay', ['items', ':', 'replay'], async (c, body) => {
    const id = c.params[0] ?? '';
    try {
      const created = await producerOf(c).replay(id, {
        expectAttempt: body.expectAttempt as number,
        expectErrorDigest: body.expectErrorDigest as string,
      });
      return { answer: { id: created.id }, id, count: 1 };
    } catch (error) {
      if (!(error instanceof ReplayRejectedError)) throw error;
      throw new HttpError(error.reason === 'not_found' ? 404 : 409, { error: error.message, reason: error.reason });
    }
  }),
  action('repair', ['items', ':', 'repair'], async (c, body) => {
    const id = c.params[0] ?? '';
    try {
      const r = await producerOf(c).repair(id, {
        expectAttempt: body.expectAttempt as number,
        expectErrorDigest: body.expectErrorDigest as string,
        reason: body.reason as string,
        actor: `dashboard:${actorOf(c.req)}`,
      });
      return { answer: r, id, count: r.duplicate ? 0 : 1 };
    } catch (error) {
      if (!(error instanceof RepairRejectedError)) throw error;
      throw new HttpError(error.reason === 'not_found' ? 404 : 409, { error: error.message, reason: error.reason });
    }
  }),
  action('cancel', ['items', ':', 'cancel'], async (c, body) => {
    const id = c.params[0] ?? '';
    if (body.reason !== undefined && typeof body.reason !== 'string') throw badRequest('reason', 'must be text');
    const outcome = await producerOf(c).cancel(id, body.reason);
    return { answer: { outcome }, id, count: outcome === 'cancelled' || outcome === 'cancel_requested' ? 1 : 0 };
  }),
  ...[true, false].map((paused) =>
    action(paused ? 'pause' : 'resume', ['queues', ':', paused ? 'pause' : 'resume'], async (c) => {
      const queue = c.params[0] ?? '';
      await (paused ? producerOf(c).pause(queue) : producerOf(c).resume(queue));
      return { answer: { queue, paused }, queue, count: 1 };
    }),
  ),
  action('replay-dead', ['replay'], async (c, body) => {
    const dryRun = dryRunOf(body);
    const filter = filterOf(body) as unknown as DeadFilter;
    if (dryRun) {
      const count = await c.backend.ledger.operator.countReplayable(filter);
      return { answer: { count }, queue: filter.queue, filter: { ...filter, dryRun }, count };
    }
    const r = await producerOf(c).replayDead(filter);
    return { answer: r, queue: filter.queue, filter: { ...filter, dryRun }, count: r.replayed };
  }),
  action('purge', ['purge'], async (c, body) => {
    const dryRun = dryRunOf(body);
    const filter = filterOf(body) as unknown as PurgeFilter;
    if (dryRun) {
      const count = await c.backend.ledger.operator.countPurgeable(filter);
      return { answer: { count }, queue: filter.queue, filter: { ...filter, dryRun }, count };
    }
    const purged = await c.backend.ledger.operator.purge(filter);
    return { answer: { purged }, queue: filter.queue, filter: { ...filter, dryRun }, count: purged };
  }),
];
