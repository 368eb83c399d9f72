import type { StageTiming } from '../../types.js';

/**
 * The most stage names one history row keeps (first named first): bounds the
 * row when a handler makes up names. A stage name is at most 64 characters.
 */
export const STAGES_KEPT = 64;

/**
 * An attempt's stages (ctx.stage) as its history row stores them (the
 * `stages` column, schema 15): a JSON array of {name, ms}, a repeated name
 * summed where it was first named, ms rounded to the microsecond. Null when
 * the attempt timed none: its row, if it has one, leaves the column out.
 */
export function stagesText(timings: readonly StageTiming[] | undefined): string | null {
  if (timings === undefined || timings.length === 0) return null;
  const summed = new Map<string, number>();
  for (const t of timings) {
    if (summed.has(t.name) || summed.size < STAGES_KEPT) summed.set(t.name, (summed.get(t.name) ?? 0) + t.ms);
  }
  return JSON.stringify([...summed].map(([name, ms]) => ({ name, ms: Math.round(ms * 1000) / 1000 })));
}

/**
 * Whether a completion writes a history row: a first-try success is recorded by the item row alone, unless it
 * timed stages, which have no other place. The single and the batched completion both ask this.
 */
export function completionNeedsHistory(h: { attempt: number; stages?: readonly StageTiming[] | undefined }): boolean {
  return h.attempt > 1 || (h.stages !== undefined && h.stages.length > 0);
}

/** A history row's `stages` as the ledger's readers see them: undefined when it has none (or not what this wrote). */
export function parseStages(text: string | null | undefined): StageTiming[] | undefined {
  if (text === null || text === undefined) return undefined;
  try {
    const parsed: unknown = JSON.parse(text);
    if (!Array.isArray(parsed)) return undefined;
    return parsed.filter(
      (s): s is StageTiming =>
        typeof s === 'object' && s !== null && typeof s.name === 'string' && typeof s.ms === 'number',
    );
  } catch {
    return undefined;
  }
}
