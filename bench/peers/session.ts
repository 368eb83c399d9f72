/**
 * The adapters one run opened: each set up, connected, and closed and torn
 * down whatever happens (at the end of its phase, at the end of the run, or
 * at SIGINT / SIGTERM).
 */
import { onCleanup } from '../support.js';
import type { PeerAdapter, PeerFactory } from './types.js';

export class Session {
  private readonly opened: PeerAdapter[] = [];
  private readonly unregister = new Map<PeerAdapter, () => void>();
  /** False once a teardown failed: the parent then drops the namespaces itself. */
  tornDown = true;

  constructor(private readonly factory: PeerFactory) {}

  async open(nsId: string): Promise<PeerAdapter> {
    const a = this.factory.create({ id: nsId });
    this.opened.push(a);
    // Dropped at SIGINT / SIGTERM too (teardown is safe after a failed or partial setup).
    this.unregister.set(
      a,
      onCleanup(() => a.teardown()),
    );
    await a.setup();
    await a.connect();
    return a;
  }

  /** Closes and tears down `a` now (a phase is over). */
  async finish(a: PeerAdapter): Promise<void> {
    const i = this.opened.indexOf(a);
    if (i >= 0) this.opened.splice(i, 1);
    this.unregister.get(a)?.();
    this.unregister.delete(a);
    await a.close().catch((e: unknown) => console.error('close failed:', e));
    await a.teardown().catch((e: unknown) => {
      this.tornDown = false;
      console.error('teardown failed:', e);
    });
  }

  async finishAll(): Promise<void> {
    for (const a of [...this.opened].reverse()) await this.finish(a);
  }
}
