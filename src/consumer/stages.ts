import { ValidationError } from '../errors.js';
import { stageName, validate } from '../ledger/validation.js';
import type { ClaimedItem, StageTiming } from '../ledger/types.js';
import { tracing } from '../tracing/process.js';
import { traceStage } from '../tracing/stage.js';

export type { StageTiming } from '../ledger/types.js';

/**
 * One run's named stages (ctx.stage, docs/design/handlers.md, Stage timing): each
 * is timed, reported as it ends (the consumer's `stage` event, which the
 * metrics turn into a histogram), run in a child span when tracing is on, and
 * kept for the debug line the run logs with its outcome and for the item's
 * attempt history (sql/stage-history.ts). Made at the first
 * ctx.stage of a run: a handler that names no stages costs nothing.
 */
export class StageClock {
  readonly timings: StageTiming[] = [];

  constructor(
    private readonly item: ClaimedItem,
    private readonly report: ((item: ClaimedItem, stage: string, ms: number) => void) | undefined,
  ) {
    // The write that ends the attempt finds them on the item and records them in its history.
    item.stages = this.timings;
  }

  async stage<T>(name: string, fn: () => Promise<T> | T): Promise<T> {
    validate(stageName, name, 'ctx.stage', 'name');
    if (typeof fn !== 'function')
      throw new ValidationError([{ field: 'fn', message: 'must be a function' }], 'ctx.stage');
    const startedMs = performance.now();
    try {
      const run = async (): Promise<T> => fn();
      return await (tracing() ? traceStage(name, this.item, run) : run());
    } finally {
      const ms = performance.now() - startedMs;
      this.timings.push({ name, ms });
      this.report?.(this.item, name, ms);
    }
  }

  /** The stages for a log line: name → milliseconds (rounded to µs), a repeated name summed. */
  summary(): Record<string, number> {
    const out: Record<string, number> = {};
    for (const t of this.timings) out[t.name] = Math.round(((out[t.name] ?? 0) + t.ms) * 1000) / 1000;
    return out;
  }
}
