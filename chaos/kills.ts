/**
 * The SIGKILLs of the fault schedule: every 5–8 s a worker other than w0 is
 * killed and started again a second later. A kill is there to measure a
 * rescue, so it goes to the worker that holds the most work in the ledger
 * (items processing under its lease: running or prefetched), waiting for one
 * while none does (the producer has stopped, the fleet is idle); only if
 * nobody held anything by the time the next kill is due does it kill an idle
 * worker (restarts are part of the chaos too), and that kill measures
 * nothing. Nothing is killed once the schedule is over.
 *
 * What the dead worker held is read from the ledger as soon as the process
 * is gone: the items the rescue check follows (chaos/rescue.ts), each with
 * the end of its lease as its holder last set it and its due time.
 */
import type { RowDataPacket } from 'mysql2/promise';
import type { FaultContext, FaultLog, HeldAtKill } from './fault-log.js';
import { CHAOS_QUEUE } from './items.js';
import type { Fleet, WorkerSlot } from './workers.js';

/** How often a kill waiting for a worker that holds work asks the ledger again. */
const HOLDER_POLL_MS = 100;

export const sleep = (ms: number, stopped?: () => boolean): Promise<void> =>
  new Promise((resolve) => {
    if (!stopped) {
      setTimeout(resolve, ms);
      return;
    }
    const until = Date.now() + ms;
    const tick = (): void => {
      if (stopped() || Date.now() >= until) resolve();
      else setTimeout(tick, Math.min(100, until - Date.now()));
    };
    tick();
  });

/** The running workers faults may hit: never w0, which stays up so its RSS covers the whole run. */
function targets(fleet: Fleet): WorkerSlot[] {
  return fleet.slots.slice(1).filter((s) => s.ready && !s.frozen && !s.down);
}

/** A random running worker that faults may hit (not w0). */
export function pickTarget(fleet: Fleet, random: () => number): WorkerSlot | undefined {
  const candidates = targets(fleet);
  return candidates[Math.floor(random() * candidates.length)];
}

const us = (col: string): string => `ROUND(UNIX_TIMESTAMP(${col}) * 1000000)`;
/** The pid in a lease owner's name (host:pid:random); CHAR columns come back without their padding. */
const pidOfOwner = (owner: unknown): number | undefined => {
  const m = /:(\d+):[0-9a-f]+$/.exec(String(owner ?? '').trim());
  return m ? Number(m[1]) : undefined;
};

/** How many items each worker process holds in the ledger now, by pid. */
async function heldByPid(ctx: FaultContext): Promise<Map<number, number>> {
  const rows = await ctx.db.query<RowDataPacket>(
    `SELECT lease_owner AS owner, COUNT(*) AS n FROM \`${ctx.db.name}\`.lw_items ` +
      `WHERE queue = ? AND state = 'processing' GROUP BY lease_owner`,
    [CHAOS_QUEUE],
  );
  const out = new Map<number, number>();
  for (const r of rows) {
    const pid = pidOfOwner(r.owner);
    if (pid !== undefined) out.set(pid, (out.get(pid) ?? 0) + Number(r.n));
  }
  return out;
}

/**
 * The worker that holds the most work (one of them at random if several
 * do), waiting for one until `deadline`; then any running worker, holding
 * nothing. The most, so that its items do not all finish between this read
 * and the kill.
 */
export async function pickHolder(ctx: FaultContext, deadline: number): Promise<WorkerSlot | undefined> {
  for (;;) {
    const held = await heldByPid(ctx).catch(() => new Map<number, number>());
    const count = (s: WorkerSlot): number => held.get(s.current?.pid ?? -1) ?? 0;
    const most = Math.max(0, ...targets(ctx.fleet).map(count));
    const holders = targets(ctx.fleet).filter((s) => most > 0 && count(s) === most);
    if (holders.length > 0) return holders[Math.floor(ctx.random() * holders.length)];
    if (Date.now() >= deadline || ctx.stopped()) return pickTarget(ctx.fleet, ctx.random);
    await sleep(HOLDER_POLL_MS, ctx.stopped);
  }
}

/** What the dead process `pid` held: its items still processing under its lease. */
async function heldAfterKill(ctx: FaultContext, pid: number): Promise<HeldAtKill[]> {
  const rows = await ctx.db.query<RowDataPacket>(
    `SELECT id, attempt, lease_owner AS owner, ${us('lease_until')} AS lease_until_us, ${us('run_after')} AS
      run_after_us, ${us('started_at')} AS started_us
     FROM \`${ctx.db.name}\`.lw_items WHERE queue = ? AND state = 'processing' AND lease_owner LIKE ?`,
    [CHAOS_QUEUE, `%:${pid}:%`],
  );
  return rows
    .filter((r) => pidOfOwner(r.owner) === pid)
    .map((r) => ({
      id: String(r.id),
      attempt: Number(r.attempt),
      leaseUntilUs: Number(r.lease_until_us),
      runAfterUs: Number(r.run_after_us),
      startedUs: Number(r.started_us),
    }));
}

/**
 * `--sabotage skip-reclaimed`, to see the re-claim check fire: what the dead
 * worker held becomes due only a second after its lease ends, so once
 * reclaimed it sits pending while the consumers' claim rounds take other work.
 */
async function delayHeld(ctx: FaultContext, held: readonly HeldAtKill[]): Promise<void> {
  if (held.length === 0) return;
  await ctx.db.query(
    `UPDATE \`${ctx.db.name}\`.lw_items SET run_after = lease_until + INTERVAL 1 SECOND ` +
      `WHERE id IN (?) AND state = 'processing'`,
    [held.map((h) => h.id)],
  );
}

export async function killLoop(ctx: FaultContext, log: FaultLog, end: number): Promise<void> {
  const restarts: Promise<unknown>[] = [];
  await sleep(2000 + ctx.random() * 2000, ctx.stopped);
  while (Date.now() < end && !ctx.stopped()) {
    const gapMs = 5000 + ctx.random() * 3000;
    const target = await pickHolder(ctx, Math.min(end, Date.now() + gapMs));
    // Waited out the schedule with nobody holding work: no kill after it.
    if (Date.now() >= end) break;
    if (target) {
      const at = Date.now();
      const g = await target.kill();
      if (g) {
        const event = log.add({ kind: 'sigkill', startMs: at, endMs: Date.now(), worker: target.name, pid: g.pid });
        event.held = await heldAfterKill(ctx, g.pid).catch(() => undefined);
        if (ctx.sabotage === 'skip-reclaimed' && event.held) await delayHeld(ctx, event.held);
        ctx.log(`SIGKILL ${target.name} (pid ${g.pid}), holding ${event.held?.length ?? '?'} items`);
        restarts.push(
          sleep(1000)
            .then(() => target.start())
            .catch((error: unknown) => ctx.log(`restart of ${target.name} failed: ${(error as Error).message}`)),
        );
      }
    } else {
      log.skipped.push(
        `SIGKILL at +${Math.round((Date.now() - (log.phases[0]?.startMs ?? Date.now())) / 1000)} s: no running worker`,
      );
    }
    await sleep(gapMs, ctx.stopped);
  }
  await Promise.all(restarts);
}
