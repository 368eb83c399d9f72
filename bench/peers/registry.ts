/**
 * Every (system, mode) the side-by-side benchmark knows, in table order:
 * lanewake first (the ratios are taken against its 'wake' mode, the
 * deployed default), then the peers.
 *
 * Modules are imported on demand: a run child loads only its own system's
 * adapter, so one peer's libraries never count in another's peak RSS.
 */
import type { PeerFactory, Workload } from './types.js';

export const WORKLOADS: readonly Workload[] = [
  'bulk',
  'latency',
  'latency-in-process',
  'ordered',
  'four-workers',
  'sixteen-workers',
  'deep-lane',
];

/**
 * The reference every ratio is taken against: lanewake as deployed (Redis
 * wake-ups, the producer's own wake channel), never the in-process
 * handover shortcut, which is a row of its own.
 */
export const REFERENCE = { system: 'lanewake', mode: 'wake' } as const;

/** The headline latency: the reference's p50 with producer and worker in two processes. */
export const HEADLINE_ROW = 'latency p50';

interface PeerModule {
  /** The `system` names its factories use (a hint for loading one system alone). */
  readonly systems: readonly string[];
  readonly load: () => Promise<PeerFactory[]>;
}

const MODULES: readonly PeerModule[] = [
  { systems: ['lanewake'], load: async () => (await import('./lanewake.js')).lanewakeFactories },
  { systems: ['bullmq'], load: async () => (await import('./bullmq.js')).bullmqFactories },
  { systems: ['graphile-worker', 'graphile'], load: async () => (await import('./graphile.js')).graphileFactories },
  { systems: ['pg-boss', 'pgboss'], load: async () => (await import('./pgboss.js')).pgBossFactories },
];

export async function allFactories(): Promise<PeerFactory[]> {
  const out: PeerFactory[] = [];
  for (const m of MODULES) out.push(...(await m.load()));
  return out;
}

export function factoryLabel(f: { system: string; mode: string }): string {
  return `${f.system}:${f.mode}`;
}

/** The factory of (system, mode), loading its own module first and the others only if it is not there. */
export async function findFactory(system: string, mode: string): Promise<PeerFactory> {
  const ordered = [
    ...MODULES.filter((m) => m.systems.includes(system)),
    ...MODULES.filter((m) => !m.systems.includes(system)),
  ];
  for (const m of ordered) {
    const f = (await m.load()).find((x) => x.system === system && x.mode === mode);
    if (f) return f;
  }
  throw new Error(`no benchmark adapter for ${system} (${mode})`);
}

/**
 * Whether `f` runs `w`, and if not, why. The ordered workloads (ordered,
 * deep-lane) need `ordersByKey` whatever the factory lists.
 */
export function runsWorkload(f: PeerFactory, w: Workload): { runs: true } | { runs: false; note: string } {
  if ((w === 'ordered' || w === 'deep-lane') && !f.ordersByKey) {
    return { runs: false, note: f.notes[w] ?? 'no per-key FIFO ordering' };
  }
  if (!f.workloads.includes(w)) return { runs: false, note: f.notes[w] ?? 'not measured in this mode' };
  return { runs: true };
}
