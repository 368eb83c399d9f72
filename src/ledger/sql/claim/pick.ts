export interface Candidate {
  id: string;
  priority: number;
  /**
   * run_after in microseconds: a JS Date keeps milliseconds, and the heads of several classes due in one millisecond
   * must still merge in due order.
   */
  due_us: number | string;
}

/**
 * Takes `limit` candidates in priority order. The first half (at least one)
 * is the earliest due, always: an item reclaimed from a dead holder, or
 * handed back unstarted, kept its due time and so is among them, and the
 * next claim round of any consumer takes it, however deep the backlog
 * behind it (docs/design/states.md, "Keeping its place"). The rest is picked at
 * random from a window of the earliest due after those (within the
 * priority group that straddles the cut), so concurrent claimers reading
 * the same candidates collide on half their claim at most.
 */
export function pick(rows: readonly Candidate[], limit: number): string[] {
  const sorted = inDueOrder(rows);
  const first = Math.min(sorted.length, Math.ceil(limit / 2));
  const out = sorted.slice(0, first).map((r) => r.id);
  let i = first;
  while (i < sorted.length && out.length < limit) {
    const p = sorted[i]!.priority;
    let j = i;
    while (j < sorted.length && sorted[j]!.priority === p) j++;
    const group = sorted.slice(i, j);
    const need = limit - out.length;
    if (group.length <= need) {
      for (const r of group) out.push(r.id);
    } else {
      // Prefer the earliest due of this group: sample from a window CANDIDATE_FACTOR × `need` wide.
      const window = group.slice(0, Math.min(group.length, candidateCount(need)));
      for (let k = 0; k < need; k++) {
        const at = k + Math.floor(Math.random() * (window.length - k));
        const tmp = window[k]!;
        window[k] = window[at]!;
        window[at] = tmp;
        out.push(window[k]!.id);
      }
    }
    i = j;
  }
  return out;
}

/** Candidates by priority, then due time. */
export function inDueOrder(rows: readonly Candidate[]): Candidate[] {
  return [...rows].sort((a, b) => a.priority - b.priority || Number(a.due_us) - Number(b.due_us));
}

/**
 * How many candidates to read for `limit` wanted items. Picking at random
 * among more than are wanted spreads concurrent claimers apart, at the cost
 * of strict due order within a priority: small claims read eight times their
 * size, large ones (prefetching consumers) twice plus a margin, since reading
 * candidates costs about as much per row as claiming them.
 */
export function candidateCount(limit: number): number {
  return Math.min(MAX_CANDIDATES, limit * CANDIDATE_FACTOR, limit * 2 + 256);
}
const CANDIDATE_FACTOR = 8;
const MAX_CANDIDATES = 1000;
