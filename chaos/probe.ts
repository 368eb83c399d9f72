/**
 * Preloaded into every chaos worker (`node --import tsx --import ./chaos/probe.ts …`,
 * see chaos/workers.ts): records what the rescue check needs from inside the
 * process, one JSON line each, to CHAOS_PROBE_FILE:
 *
 * - every reconciler pass, claim round and wake read, as lanewake publishes
 *   them on its diagnostics channels (src/diagnostics.ts);
 * - the event loop's delay (node:perf_hooks monitorEventLoopDelay), the max,
 *   p99 and mean of each sample window, so a check can allow exactly the
 *   lateness this process showed around a given moment.
 *
 * Each line is written with writeSync on a file opened for appending: what
 * was written before a SIGKILL is in the file. Nothing here touches the
 * ledger or Redis, and nothing keeps the process alive.
 */
import { subscribe } from 'node:diagnostics_channel';
import { closeSync, openSync, writeSync } from 'node:fs';
import { monitorEventLoopDelay } from 'node:perf_hooks';
import { DIAGNOSTICS } from '../src/diagnostics.js';

/** The monitor's timer: a stall shows as that timer firing late. */
const ELD_RESOLUTION_MS = 10;
/** How often a sample window is closed and written (short, so a window brackets one claim round closely). */
const ELD_SAMPLE_MS = 100;

export type ProbeLine =
  | { k: 'start'; label: string; pid: number; atMs: number }
  | { k: 'pass' | 'round' | 'read'; m: unknown }
  | { k: 'eld'; fromMs: number; toMs: number; maxMs: number; p99Ms: number; meanMs: number; samples: number };

const file = process.env.CHAOS_PROBE_FILE;
if (file) start(file);

function start(path: string): void {
  const fd = openSync(path, 'a');
  const write = (line: ProbeLine): void => {
    writeSync(fd, `${JSON.stringify(line)}\n`);
  };
  write({ k: 'start', label: process.env.CHAOS_WORKER ?? `pid${process.pid}`, pid: process.pid, atMs: Date.now() });
  subscribe(DIAGNOSTICS.reconcilePass, (m) => write({ k: 'pass', m }));
  subscribe(DIAGNOSTICS.claimRound, (m) => write({ k: 'round', m }));
  subscribe(DIAGNOSTICS.wakeRead, (m) => write({ k: 'read', m }));

  const eld = monitorEventLoopDelay({ resolution: ELD_RESOLUTION_MS });
  eld.enable();
  let fromMs = Date.now();
  const sample = (): void => {
    const toMs = Date.now();
    const ms = (ns: number): number => Math.round(ns / 1e4) / 100;
    // An empty window (the timer never fired in it: the whole window was one stall) counts as delayed by its length.
    const empty = eld.count === 0;
    write({
      k: 'eld',
      fromMs,
      toMs,
      maxMs: empty ? toMs - fromMs : ms(eld.max),
      p99Ms: empty ? toMs - fromMs : ms(eld.percentile(99)),
      meanMs: empty ? toMs - fromMs : ms(eld.mean),
      samples: eld.count,
    });
    eld.reset();
    fromMs = toMs;
  };
  setInterval(sample, ELD_SAMPLE_MS).unref();
  process.once('exit', () => {
    sample();
    closeSync(fd);
  });
}
