/** Restart backoff of a crashed consumer loop: 1 s doubling to 30 s, reset after a healthy run. */
export class RestartBackoff {
  private next: number;

  constructor(
    private readonly initialMs = 1_000,
    private readonly maxMs = 30_000,
    private readonly healthyAfterMs = 60_000,
  ) {
    this.next = initialMs;
  }

  /** The delay before the next restart, given how long the run that just ended lasted. */
  delayAfter(runMs: number): number {
    if (runMs >= this.healthyAfterMs) this.next = this.initialMs;
    const delay = this.next;
    this.next = Math.min(this.maxMs, this.next * 2);
    return delay;
  }
}
