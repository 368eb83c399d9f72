/**
 * The concurrency keys this ledger's hand-ons last found with items waiting
 * in their lines (docs/design/keys.md, Concurrency keys). A keyed completion
 * whose keys are none of these gives up their slots in the round trip that
 * ends the items (sql/keys/hand-on.ts, releaseUnwaited), under a guard that
 * refuses it if a line was there after all; the full hand-on then runs and
 * says which keys it found waiting. A hint that picks the path, never the
 * authority: the guard is.
 */
export class KeyLines {
  private readonly lined = new Set<string>();

  /**
   * @param cap keys remembered at most; past it the memory starts again (a lost hint costs a refused attempt, nothing
   * more).
   */
  constructor(private readonly cap = 100_000) {}

  /** Whether any of these keys (queue-scoped) was last seen with a line. */
  anyLined(keys: Iterable<string>): boolean {
    for (const k of keys) if (this.lined.has(k)) return true;
    return false;
  }

  /** What a hand-on found: `lined` of `keys` had items waiting, the rest none. */
  saw(keys: Iterable<string>, lined: ReadonlySet<string>): void {
    for (const k of keys) {
      if (!lined.has(k)) this.lined.delete(k);
      else {
        if (this.lined.size >= this.cap) this.lined.clear();
        this.lined.add(k);
      }
    }
  }
}
