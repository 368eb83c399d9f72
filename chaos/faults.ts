/**
 * The fault schedule: a cycle of phases, repeated for the length of the run,
 * with SIGKILLs of a worker that holds work (restarted a second later)
 * throughout (chaos/kills.ts). Every fault is recorded with its wall-clock
 * times, so the checks can say which kills happened on a healthy network and
 * hold those to the rescue bounds.
 */
import type { FaultContext, FaultKind, FaultLog, PhaseWindow } from './fault-log.js';
import { killLoop, pickHolder, pickTarget, sleep } from './kills.js';
import type { Toxic } from './toxiproxy.js';

export {
  type FaultContext,
  type FaultEvent,
  type FaultKind,
  FaultLog,
  type HeldAtKill,
  type PhaseWindow,
} from './fault-log.js';

export const MYSQL_PROXY = 'mysql';
export const REDIS_PROXY = 'redis';

/**
 * The schedule's phases. Kills during a `network` phase (any fault on the
 * links to MariaDB or Redis) are not held to the rescue bound; during a
 * `linkBroken` phase (resets, timeouts) a live worker may lose a lease
 * because its renewals cannot reach the ledger.
 */
interface Phase {
  name: string;
  seconds: number;
  network: boolean;
  linkBroken: boolean;
  run: (ctx: FaultContext, ms: number) => Promise<void>;
}

let toxicSeq = 0;

/** Adds toxics for `ms`, then removes them (also when the schedule is cut short). */
async function withToxics(
  ctx: FaultContext,
  log: FaultLog,
  kind: FaultKind,
  ms: number,
  toxics: { proxy: string; toxic: Omit<Toxic, 'name'> }[],
): Promise<void> {
  const added: { proxy: string; name: string }[] = [];
  const event = log.add({
    kind,
    startMs: Date.now(),
    endMs: Date.now(),
    detail: toxics.map((t) => `${t.proxy}:${t.toxic.type}/${t.toxic.stream}`).join(' '),
  });
  try {
    for (const { proxy, toxic } of toxics) {
      const name = `${toxic.type}_${toxic.stream}_${++toxicSeq}`;
      await ctx.proxy.addToxic(proxy, { ...toxic, name });
      added.push({ proxy, name });
    }
    await sleep(ms, ctx.stopped);
  } finally {
    for (const a of added) await ctx.proxy.removeToxic(a.proxy, a.name);
    event.endMs = Date.now();
  }
}

function phases(log: FaultLog): Phase[] {
  return [
    { name: 'kills only', seconds: 12, network: false, linkBroken: false, run: (ctx, ms) => sleep(ms, ctx.stopped) },
    {
      name: 'KILL CONNECTION every second',
      seconds: 10,
      network: true,
      linkBroken: false,
      run: async (ctx, ms) => {
        const until = Date.now() + ms;
        while (Date.now() < until && !ctx.stopped()) {
          const at = Date.now();
          const n = await ctx.db.killWorkerSessions();
          log.add({ kind: 'kill-connections', startMs: at, endMs: Date.now(), detail: `${n} sessions` });
          await sleep(1000, ctx.stopped);
        }
      },
    },
    {
      name: 'a frozen worker (SIGSTOP past the lease)',
      seconds: 10,
      network: false,
      linkBroken: false,
      run: async (ctx, ms) => {
        const until = Date.now() + ms;
        await sleep(1000, ctx.stopped);
        // The worker holding the most work, waited for while the freeze still fits the phase (a frozen
        // worker holding nothing measures nothing); a target may be restarting after a kill.
        const latest = until - ctx.leaseMs - 1500;
        let target = await pickHolder(ctx, latest);
        while (!target && !ctx.stopped() && Date.now() < latest) {
          await sleep(200);
          target = pickTarget(ctx.fleet, ctx.random);
        }
        if (!target) {
          log.skipped.push('SIGSTOP: no worker to freeze');
        } else if (!ctx.stopped()) {
          const pid = target.current?.pid ?? -1;
          const event = log.add({ kind: 'sigstop', startMs: Date.now(), endMs: Date.now(), worker: target.name, pid });
          target.freeze();
          ctx.log(`SIGSTOP ${target.name} (pid ${pid}) for ${ctx.leaseMs + 1500} ms`);
          await sleep(ctx.leaseMs + 1500);
          target.thaw();
          event.endMs = Date.now();
        }
        await sleep(until - Date.now(), ctx.stopped);
      },
    },
    {
      name: 'Redis stopped for 10 s, restarted empty',
      seconds: 14,
      network: true,
      linkBroken: false,
      run: async (ctx, ms) => {
        const until = Date.now() + ms;
        await sleep(1000, ctx.stopped);
        if (ctx.stopped()) return;
        const event = log.add({ kind: 'redis-down', startMs: Date.now(), endMs: Date.now() });
        await ctx.redis.stop();
        ctx.log('redis-server stopped');
        try {
          await sleep(10_000);
        } finally {
          await ctx.redis.start();
          event.endMs = Date.now();
          ctx.log('redis-server started again, empty');
        }
        await sleep(until - Date.now(), ctx.stopped);
      },
    },
    {
      name: 'latency on MariaDB and Redis',
      seconds: 8,
      network: true,
      linkBroken: false,
      run: (ctx, ms) =>
        withToxics(ctx, log, 'latency', ms, [
          {
            proxy: MYSQL_PROXY,
            toxic: { type: 'latency', stream: 'downstream', toxicity: 1, attributes: { latency: 20, jitter: 10 } },
          },
          {
            proxy: MYSQL_PROXY,
            toxic: { type: 'latency', stream: 'upstream', toxicity: 1, attributes: { latency: 10, jitter: 5 } },
          },
          {
            proxy: REDIS_PROXY,
            toxic: { type: 'latency', stream: 'downstream', toxicity: 1, attributes: { latency: 30, jitter: 10 } },
          },
        ]),
    },
    {
      name: 'connection resets',
      seconds: 6,
      network: true,
      linkBroken: true,
      run: (ctx, ms) =>
        withToxics(ctx, log, 'reset-peer', ms, [
          {
            proxy: MYSQL_PROXY,
            toxic: { type: 'reset_peer', stream: 'downstream', toxicity: 0.3, attributes: { timeout: 200 } },
          },
          {
            proxy: REDIS_PROXY,
            toxic: { type: 'reset_peer', stream: 'downstream', toxicity: 0.3, attributes: { timeout: 200 } },
          },
        ]),
    },
    {
      name: 'timeouts (data stops, connection closed after 1.5 s)',
      seconds: 6,
      network: true,
      linkBroken: true,
      run: (ctx, ms) =>
        withToxics(ctx, log, 'timeout', ms, [
          {
            proxy: MYSQL_PROXY,
            toxic: { type: 'timeout', stream: 'upstream', toxicity: 0.3, attributes: { timeout: 1500 } },
          },
          {
            proxy: REDIS_PROXY,
            toxic: { type: 'timeout', stream: 'upstream', toxicity: 0.3, attributes: { timeout: 1500 } },
          },
        ]),
    },
    { name: 'kills only', seconds: 14, network: false, linkBroken: false, run: (ctx, ms) => sleep(ms, ctx.stopped) },
  ];
}

export const CYCLE_SECONDS = 80;

/**
 * Runs the phases in order, cycling, for `totalMs` (a shorter run cuts the
 * cycle short), while the kill loop SIGKILLs a worker that holds work every 5–8 s.
 */
export async function runFaults(ctx: FaultContext, totalMs: number, log: FaultLog): Promise<void> {
  const end = Date.now() + totalMs;
  const kills = killLoop(ctx, log, end);
  try {
    const cycle = phases(log);
    for (let i = 0; Date.now() < end && !ctx.stopped(); i = (i + 1) % cycle.length) {
      const phase = cycle[i]!;
      const ms = Math.min(phase.seconds * 1000, end - Date.now());
      if (ms < 1000) break;
      const window: PhaseWindow = {
        name: phase.name,
        startMs: Date.now(),
        endMs: Date.now(),
        network: phase.network,
        linkBroken: phase.linkBroken,
      };
      log.phases.push(window);
      ctx.log(`phase: ${phase.name} (${Math.round(ms / 1000)} s)`);
      try {
        await phase.run(ctx, ms);
      } finally {
        window.endMs = Date.now();
      }
    }
  } finally {
    await kills;
  }
}
