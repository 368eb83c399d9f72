/**
 * What the fault schedule records (chaos/faults.ts) and what the kill loop
 * (chaos/kills.ts) reads and writes: in a file of its own so neither of the
 * two imports the other's types back.
 */
import type { ChaosDatabase } from './database.js';
import type { Sabotage } from './options.js';
import type { PrivateRedis } from './processes.js';
import type { Toxiproxy } from './toxiproxy.js';
import type { Fleet } from './workers.js';

export type FaultKind =
  | 'sigkill'
  | 'sigstop'
  | 'kill-connections'
  | 'redis-down'
  | 'latency'
  | 'reset-peer'
  | 'timeout';

export interface FaultEvent {
  kind: FaultKind;
  startMs: number;
  endMs: number;
  /** The worker (slot name and pid) a process fault hit. */
  worker?: string;
  pid?: number;
  detail?: string;
  /**
   * A SIGKILL: what its worker held in the ledger right after it died (chaos/kills.ts), undefined if that read failed.
   */
  held?: HeldAtKill[];
}

/** An item a killed worker held, read from the ledger the moment the process was gone. */
export interface HeldAtKill {
  id: string;
  /** The attempt it was on: its reclaim writes the history row of this attempt. */
  attempt: number;
  /** The lease's end, as the holder's last claim or renewal set it (the ledger's NOW(6) + lease), µs. */
  leaseUntilUs: number;
  /** Its due time, which a reclaim keeps: its place among the heads when it is pending again, µs. */
  runAfterUs: number;
  /** When it was claimed, µs. */
  startedUs: number;
}

export interface FaultContext {
  fleet: Fleet;
  redis: PrivateRedis;
  proxy: Toxiproxy;
  db: ChaosDatabase;
  leaseMs: number;
  random: () => number;
  /** `skip-reclaimed`: what a killed worker held is made due only a second after its lease ends (chaos/kills.ts). */
  sabotage?: Sabotage | undefined;
  log: (line: string) => void;
  /** Set once the schedule is over (or aborted): every loop ends. */
  stopped: () => boolean;
}

export interface PhaseWindow {
  name: string;
  startMs: number;
  endMs: number;
  network: boolean;
  linkBroken: boolean;
}

export class FaultLog {
  readonly events: FaultEvent[] = [];
  readonly phases: PhaseWindow[] = [];
  /** Faults that did not run as planned (e.g. no worker to freeze): reported, not fatal. */
  readonly skipped: string[] = [];

  add(e: FaultEvent): FaultEvent {
    this.events.push(e);
    return e;
  }

  count(kind: FaultKind): number {
    return this.events.filter((e) => e.kind === kind).length;
  }
}
