/**
 * The flags of bench/compare.ts, the (system, mode)s they select, and
 * whether the run is a full one (the only kind that may rewrite
 * bench/results/latest.json and the benchmark page).
 */
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
export const FULL_RUNS = 3;

export function parseArgs(argv: readonly string[]): Options | 'help' {
  const opts: Options = { runs: FULL_RUNS, scale: 1, systems: null, workloads: [...WORKLOADS], json: false };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i]!;
    const [name, inline] = a.includes('=') ? [a.slice(0, a.indexOf('=')), a.slice(a.indexOf('=') + 1)] : [a, undefined];
    const value = (): string => {
      const v = inline ?? argv[++i];
      if (v === undefined || v === '') throw new UsageError(`${name} needs a value`);
      return v;
    };
    switch (name) {
      case '--runs': {
        const n = Number(value());
        if (!Number.isInteger(n) || n < 1) throw new UsageError('--runs must be a whole number ≥ 1');
        opts.runs = n;
        break;
      }
      case '--scale': {
        const n = Number(value());
        if (!Number.isFinite(n) || n <= 0 || n > 10) throw new UsageError('--scale must be a number in (0, 10]');
        opts.scale = n;
        break;
      }
      case '--systems':
        opts.systems = value();
        break;
      case '--workloads': {
        const ws = value()
          .split(',')
          .map((s) => s.trim())
          .filter((s) => s !== '');
        const bad = ws.filter((w) => !(WORKLOADS as readonly string[]).includes(w));
        if (bad.length > 0) throw new UsageError(`unknown workload ${bad.join(', ')}: use ${WORKLOADS.join(', ')}`);
        opts.workloads = WORKLOADS.filter((w) => ws.includes(w));
        break;
      }
      case '--json':
        opts.json = true;
        break;
      case '--help':
      case '-h':
        return 'help';
      default:
        throw new UsageError(`unknown argument ${a}`);
    }
  }
  return opts;
}

/**
 * A full run: every (system, mode) and workload, full size, at least
 * FULL_RUNS runs. Only a full run's results may replace the published ones.
 */
export function isFullRun(opts: Options, selected: readonly PeerFactory[], all: readonly PeerFactory[]): boolean {
  return (
    selected.length === all.length &&
    opts.workloads.length === WORKLOADS.length &&
    opts.scale === 1 &&
    opts.runs >= FULL_RUNS
  );
}

/**
 * `--systems` entries: a system ("bullmq") or system:mode ("lanewake:poll 5 s").
 * Modes may themselves contain commas ("batch worker, poll 0.5 s"), so the
 * comma-split pieces are re-joined greedily, longest known name first.
 */
function splitSystems(raw: string, all: readonly PeerFactory[]): string[] {
  const known = new Set([...all.map((f) => f.system), ...all.map(factoryLabel)]);
  const pieces = raw.split(',');
  const out: string[] = [];
  for (let i = 0; i < pieces.length; ) {
    let taken = 0;
    for (let j = pieces.length; j > i; j--) {
      const candidate = pieces.slice(i, j).join(',').trim();
      if (known.has(candidate)) {
        out.push(candidate);
        taken = j - i;
        break;
      }
    }
    if (taken === 0) {
      const p = pieces[i]!.trim();
      if (p !== '') out.push(p);
      taken = 1;
    }
    i += taken;
  }
  return out;
}

export function selectFactories(all: readonly PeerFactory[], raw: string | null): PeerFactory[] {
  if (raw === null) return [...all];
  const systems = splitSystems(raw, all);
  const unknown = systems.filter((s) => !all.some((f) => f.system === s || factoryLabel(f) === s));
  if (unknown.length > 0) {
    throw new UsageError(
      `unknown system ${unknown.join(', ')}: use one of ` +
        `${[...new Set(all.map((f) => f.system))].join(', ')} or system:mode ` +
        `(${all.map(factoryLabel).join(', ')})`,
    );
  }
  return all.filter((f) => systems.includes(f.system) || systems.includes(factoryLabel(f)));
}
