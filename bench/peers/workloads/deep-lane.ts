/**
 * deep-lane: does one long lane slow everyone else down? The in-process
 * latency measurement with jobs on fresh keys, twice in fresh namespaces:
 * once with nothing else queued (absent), once with one key already
 * holding `deepLaneDepth` jobs, which keeps being processed one at a time
 * meanwhile (present). Systems with per-key order only.
 */
import { percentile } from '../../support.js';
import { Effects, everyStarted, exactly } from '../effects.js';
import type { WorkloadFn } from '../phase.js';
import { enqueueAll } from '../phase.js';
import type { BenchJob } from '../types.js';
import { inProcessLatency } from './latency.js';

export const deepLane: WorkloadFn = async (session, args, s, out) => {
  const m = s.deepLaneJobs;
  const fresh = Array.from({ length: m }, (_, n): BenchJob => ({ n, key: `f${n}`, seq: 0 }));
  {
    const a = await session.open(args.ns[0]!);
    const phase = {
      phase: 'deep-lane absent',
      jobs: fresh,
      effects: new Effects(m),
      drainTo: m,
      completedWant: exactly(m),
      ordered: true,
    };
    out.values['p50, deep lane absent'] = percentile(await inProcessLatency(a, s, out, phase), 50);
    await session.finish(a);
  }
  {
    const a = await session.open(args.ns[1]!);
    const deep = Array.from({ length: s.deepLaneDepth }, (_, i): BenchJob => ({ n: m + i, key: 'deep', seq: i }));
    await enqueueAll(a, deep, s.bulkBatch);
    // Waits for the fresh jobs only; once the worker stopped, every job that started (fresh or deep) must be counted
    // completed.
    const phase = {
      phase: 'deep-lane present',
      jobs: fresh,
      effects: new Effects(m + s.deepLaneDepth, m),
      drainTo: undefined,
      completedWant: everyStarted,
      ordered: true,
    };
    out.values['p50, deep lane present'] = percentile(await inProcessLatency(a, s, out, phase), 50);
    await session.finish(a);
  }
  out.values['present / absent'] =
    (out.values['p50, deep lane present'] ?? Number.NaN) / (out.values['p50, deep lane absent'] ?? Number.NaN);
};
