/**
 * The flags of bench/compare.ts, the (system, mode)s they select, and whether the run is a full one (the only
 * kind that may rewrite bench/results/latest.json and the benchmark page).
 */
import { parseArgs as parseFlags } from 'node:util';
import { WORKLOADS, factoryLabel } from './peers/registry.js';
import type { PeerFactory, Workload } from './peers/types.js';

export interface Options {
  runs: number;
  scale: number;
  /** Raw --systems value (split once the factories are known); null: every system. */
  systems: string | null;
  workloads: Workload[];
  json: boolean;
}

export class UsageError extends Error {}

export const USAGE =
  `usage: tsx bench/compare.ts [--runs N] [--scale F] [--systems a,b:mode] ` +
  `[--workloads ${WORKLOADS.join(',')}] [--json]`;

/** The fewest runs a published result may have. */
const FULL_RUNS = 3;

export function parseArgs(argv: readonly string[]): Options | 'help' {
  let v: ReturnType<typeof flags>['values'];
  const flags = (args: string[]) =>
    parseFlags({
      args,
      options: {
        runs: { type: 'string' },
        scale: { type: 'string' },
        systems: { type: 'string' },
        workloads: { type: 'string' },
        json: { type: 'boolean' },
        help: { type: 'boolean', short: 'h' },
      },
    });
  try {
    v = flags([...argv]).values;
  } catch (e) {
    throw new UsageError(e instanceof Error ? e.message : String(e));
  }
  if (v.help) return 'help';
  const runs = Number(v.runs ?? FULL_RUNS);
  if (!Number.isInteger(runs) || runs < 1) throw new UsageError('--runs must be a whole number ≥ 1');
  const scale = Number(v.scale ?? 1);
  if (!Number.isFinite(scale) || scale <= 0 || scale > 10) throw new UsageError('--scale must be a number in (0, 10]');
  const ws = (v.workloads ?? WORKLOADS.join(',')).split(',').map((s) => s.trim());
  const bad = ws.filter((w) => w !== '' && !(WORKLOADS as readonly string[]).includes(w));
  if (bad.length > 0) throw new UsageError(`unknown workload ${bad.join(', ')}: use ${WORKLOADS.join(', ')}`);
  const workloads = WORKLOADS.filter((w) => ws.includes(w));
  return { runs, scale, systems: v.systems ?? null, workloads, json: v.json ?? false };
}

/** A full run: every (system, mode) and workload, full size, at least FULL_RUNS runs. */
export function isFullRun(opts: Options, selected: readonly PeerFactory[], all: readonly PeerFactory[]): boolean {
  const everything = selected.length === all.length && opts.workloads.length === WORKLOADS.length;
  return everything && opts.scale === 1 && opts.runs >= FULL_RUNS;
}

/**
 * `--systems`: systems ("bullmq") or system:mode ("lanewake:poll 5 s"). Modes may hold commas ("batch worker,
 * poll 0.5 s"), so each known name is taken out of the list first, longest first.
 */
export function selectFactories(all: readonly PeerFactory[], raw: string | null): PeerFactory[] {
  if (raw === null) return [...all];
  const known = [...new Set([...all.map((f) => f.system), ...all.map(factoryLabel)])];
  let rest = `,${raw
    .split(',')
    .map((s) => s.trim())
    .join(',')},`;
  const systems: string[] = [];
  const norm = (x: string): string =>
    x
      .split(',')
      .map((p) => p.trim())
      .join(',');
  for (const name of known.sort((a, b) => b.length - a.length)) {
    if (!rest.includes(`,${norm(name)},`)) continue;
    systems.push(name);
    while (rest.includes(`,${norm(name)},`)) rest = rest.replace(`,${norm(name)},`, ',');
  }
  const unknown = rest.split(',').filter((s) => s !== '');
  if (unknown.length > 0) {
    throw new UsageError(
      `unknown system ${unknown.join(', ')}: use one of ` +
        `${[...new Set(all.map((f) => f.system))].join(', ')} or system:mode ` +
        `(${all.map(factoryLabel).join(', ')})`,
    );
  }
  return all.filter((f) => systems.includes(f.system) || systems.includes(factoryLabel(f)));
}
