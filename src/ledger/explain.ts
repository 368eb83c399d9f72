import type { LedgerDb } from './connection.js';
import { liveConsumers } from './sql/fleet/consumers.js';
import { readWhyFacts, type WhyFacts } from './sql/operator/explain.js';
import { getItem } from './sql/operator/inspect.js';
import type { LedgerTables } from './tables.js';
import { RATE_LIMITED_REASON, TERMINAL_STATES, type LiveConsumer, type WorkItem } from './types.js';
import type { Explanation, WhyCode } from './operator-types.js';

/**
 * "Why isn't this item running?" (docs/design/supervisor.md): the first reason that
 * holds, in the order a claim would meet them, computed from the ledger: the
 * item, its lane's head, the queue's processing count and ownership epoch,
 * and the live consumers' heartbeats. Undefined when there is no such item.
 */
export async function explainItem(db: LedgerDb, t: LedgerTables, id: string): Promise<Explanation | undefined> {
  const item = await getItem(db, t, id);
  if (!item) return undefined;
  const [facts, consumers] = await Promise.all([readWhyFacts(db, t, item), liveConsumers(db, t, item.queue)]);
  const reason = why(item, facts, consumers);
  const fired = facts.schedule;
  if (!fired) return { id: item.id, state: item.state, at: facts.now, ...reason };
  // Whatever holds it, say where it came from: a schedule's fire.
  const fireTime = fired.fireTime.toISOString();
  return {
    id: item.id,
    state: item.state,
    at: facts.now,
    code: reason.code,
    message: `${reason.message}; it was enqueued by schedule ${fired.name}'s fire of ${fireTime}`,
    details: { ...reason.details, schedule: fired.name, fireTime },
    schedule: { name: fired.name, fireTime },
  };
}

type Reason = { code: WhyCode; message: string; details: Explanation['details'] };

/** Why a live consumer claims only rescued work (LiveConsumer.staleOnly), as explain says it. */
const STALE_ONLY_MODES: Record<string, string> = {
  queue: 'its queue is stale-only, as it last read it',
  consumer: 'its staleOnly option',
  pool: 'pool saturated',
  slow: 'claims slow',
};

const iso = (d: Date | null): string | null => (d === null ? null : d.toISOString());

function why(item: WorkItem, facts: WhyFacts, consumers: readonly LiveConsumer[]): Reason {
  const { now } = facts;
  if (TERMINAL_STATES.includes(item.state)) {
    return {
      code: 'terminal',
      message: `it ended ${item.state} at ${iso(item.terminalAt)}`,
      details: { state: item.state, terminalAt: iso(item.terminalAt) },
    };
  }
  if (item.state === 'processing') {
    const details = { owner: item.leaseOwner, leaseUntil: iso(item.leaseUntil), attempt: item.attempt };
    if (item.leaseUntil !== null && item.leaseUntil < now) {
      return {
        code: 'lease_expired',
        message: `its holder ${item.leaseOwner ?? '?'} stopped renewing at ${iso(
          item.leaseUntil,
        )}: the next sweep takes it back`,
        details,
      };
    }
    return {
      code: 'processing',
      message: `it is running: held by ${item.leaseOwner ?? '?'} until ${iso(item.leaseUntil)}`,
      details,
    };
  }
  if (item.state === 'blocked') {
    return {
      code: 'blocked_on_dependency',
      message:
        `it is blocked on dependency ${item.dependencyKey ?? '?'} since ${iso(item.blockedAt)}; ` +
        `next probe at ${iso(item.probeAfter)}`,
      details: {
        dependencyKey: item.dependencyKey,
        since: iso(item.blockedAt),
        probeAt: iso(item.probeAfter),
        expiresAt: iso(item.blockExpiresAt),
      },
    };
  }
  if (facts.paused) {
    return {
      code: 'queue_paused',
      message: `its queue ${item.queue} is paused: it claims nothing until resumed`,
      details: { queue: item.queue },
    };
  }
  if (item.runAfter > now && facts.lastReleaseReason === RATE_LIMITED_REASON) {
    return {
      code: 'rate_limited',
      message: `its key is over its rate limit: its turn is at ${iso(item.runAfter)}`,
      details: { until: iso(item.runAfter) },
    };
  }
  if (item.runAfter > now) {
    return {
      code: 'not_due',
      message: `it is not due until ${iso(item.runAfter)}`,
      details: { runAfter: iso(item.runAfter) },
    };
  }
  // A workflow's job that is not its own head waits for its dependencies (docs/design/workflows.md).
  if (!item.isHead && item.workflowId !== undefined) {
    return {
      code: 'waiting_for_dependencies',
      message: `it waits for its dependencies in workflow ${item.workflowId} (lanewake workflow ${item.workflowId})`,
      details: { workflow: item.workflowId },
    };
  }
  if (!item.isHead && item.concurrencyKey !== null && item.lane === null) {
    const k = facts.key;
    const of = k?.limit === null || k?.limit === undefined ? '' : ` of ${k.limit}`;
    const byType = item.keyScope === 'type' ? ` (for type ${item.type}, under its own limit)` : '';
    return {
      code: 'key_at_limit',
      message: `its concurrency key ${item.concurrencyKey}${byType} is at its limit: ${k?.admitted ?? '?'}${
        of
      } admitted, ${k?.waiting ?? '?'} waiting; it takes the next slot its key frees, earliest due first`,
      details: {
        key: item.concurrencyKey,
        scope: item.keyScope,
        admitted: k?.admitted ?? null,
        limit: k?.limit ?? null,
        waiting: k?.waiting ?? null,
      },
    };
  }
  if (!item.isHead) {
    const head = facts.laneHead;
    return {
      code: 'behind_lane_head',
      message: head
        ? `it waits behind its lane's head ${head.id}, which is ${head.state}`
        : `it waits behind an earlier item of lane ${item.lane ?? '?'}`,
      details: { lane: item.lane, headId: head?.id ?? null, headState: head?.state ?? null },
    };
  }
  // A rescued item (its last lease expired) is what a stale-only queue still claims.
  if (facts.staleOnly && item.failureClass !== 'lease_expired') {
    return {
      code: 'stale_only',
      message:
        `its queue ${item.queue} is stale-only: it rescues items whose lease expired and takes no new pending work ` +
        `until it is set back (lanewake stale-only ${item.queue} off)`,
      details: { queue: item.queue },
    };
  }
  return whoServes(item, facts, consumers);
}

/** A due pending head: whether a live consumer would claim it, and if none, which filter stops them all. */
function whoServes(item: WorkItem, facts: WhyFacts, consumers: readonly LiveConsumer[]): Reason {
  const live = consumers.length;
  if (live === 0)
    return {
      code: 'no_live_consumer',
      message: `no live consumer serves queue ${item.queue}`,
      details: { queue: item.queue },
    };
  const ofClass = consumers.filter((c) => c.classes.includes(item.queueClass));
  if (ofClass.length === 0) {
    const served = [...new Set(consumers.flatMap((c) => c.classes))].join(', ');
    return {
      code: 'class_not_served',
      message: `no live consumer serves class ${item.queueClass} (they serve ${served})`,
      details: { class: item.queueClass, served, live },
    };
  }
  const ofType = ofClass.filter((c) => c.types === null || c.types.includes(item.type));
  if (ofType.length === 0) {
    return {
      code: 'type_not_served',
      message: `no live consumer of class ${item.queueClass} claims type ${item.type}`,
      details: { type: item.type, live },
    };
  }
  const epoch = facts.ownershipEpoch;
  const unfenced = ofType.filter((c) => c.epoch === null || c.epoch === epoch);
  if (unfenced.length === 0) {
    const held = [...new Set(ofType.map((c) => c.epoch))].join(', ');
    return {
      code: 'epoch_not_served',
      message: `the queue's ownership epoch ${
        epoch ?? 'none'
      } waits for activation: its consumers are fenced with epoch ${held}`,
      details: { epoch, consumerEpochs: held },
    };
  }
  // A consumer held to rescued work (its option, or its gate tripped) takes no new pending work.
  const takers = item.failureClass === 'lease_expired' ? unfenced : unfenced.filter((c) => c.staleOnly === null);
  if (takers.length === 0) {
    const mode = (c: LiveConsumer): string => STALE_ONLY_MODES[c.staleOnly ?? ''] ?? String(c.staleOnly);
    const modes = unfenced.map((c) => `${c.name}: ${mode(c)}`).join('; ');
    const [only] = unfenced;
    return {
      code: 'stale_only',
      message:
        unfenced.length === 1 && only !== undefined
          ? `consumer ${only.name} claims only stale work: ${mode(only)}`
          : `its consumers claim only stale work: ${modes}`,
      details: { queue: item.queue, consumers: modes },
    };
  }
  const caps = takers.map((c) => c.maxProcessing);
  const cap = caps.every((c): c is number => c !== null) ? Math.max(...caps) : null;
  if (cap !== null && facts.processing >= cap) {
    return {
      code: 'queue_capped',
      message: `the queue is at its cap: ${facts.processing} processing of maxProcessing ${cap}`,
      details: { processing: facts.processing, maxProcessing: cap },
    };
  }
  return {
    code: 'claimable',
    message:
      `it is claimable now: ${takers.length} live consumer(s) serve it` +
      ' and take it in their next claim round or sweep',
    details: { consumers: takers.length },
  };
}
