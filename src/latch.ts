/** A level-triggered wake-up for a loop: `notify()` any number of times, `wait()` returns once per burst. */
export class Latch {
  private pending = false;
  private waiter: (() => void) | undefined;

  notify(): void {
    this.pending = true;
    const w = this.waiter;
    this.waiter = undefined;
    w?.();
  }

  /** Resolves on the next notify (or at once if one came since the last wait), or after `timeoutMs`. */
  wait(timeoutMs: number): Promise<void> {
    if (this.pending) {
      this.pending = false;
      return Promise.resolve();
    }
    return new Promise((resolve) => {
      const timer = setTimeout(() => {
        this.waiter = undefined;
        resolve();
      }, timeoutMs);
      this.waiter = () => {
        clearTimeout(timer);
        this.pending = false;
        resolve();
      };
    });
  }
}
