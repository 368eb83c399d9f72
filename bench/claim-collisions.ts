/**
 * How often concurrent claimers collide (issue 21 §2): N claimers, each a
 * Ledger with its own pool, claim from one queue's backlog in a loop (claim,
 * then complete what was won) for a fixed time. A claim of `limit` that wins
 * fewer lost the rest to another claimer's CAS, since the backlog always
 * has more than `limit` due heads: CAS losses per claimed item =
 * Σ(limit − won) / Σ won. Runs alternate between the code under test and a
 * base checkout (`--base`), so the machine's noise falls on both alike.
 *
 *   npx tsx bench/claim-collisions.ts                          # this checkout, 4 and 16 claimers
 *   npx tsx bench/claim-collisions.ts --base /tmp/lw-bench-base --runs 5
 *   npx tsx bench/claim-collisions.ts --claimers 4,16 --limit 8 --seconds 4
 *
 * Server: LANEWAKE_BENCH_MYSQL_URL (default mysql://root@127.0.0.1:3306).
 * Each run uses a fresh database, dropped after. The claims run from the
 * TypeScript sources of each checkout (its src/ledger/ledger.ts).
 */
import { fileURLToPath, pathToFileURL } from 'node:url';
import type * as Lanewake from '../src/index.js';
import { cliFlag, createBenchDatabase, median, runBenchmark } from './support.js';

interface Run {
  code: string;
  claimers: number;
  won: number;
  lost: number;
  rounds: number;
  perSecond: number;
}

type LedgerClass = typeof Lanewake.Ledger;

const args = process.argv.slice(2);
const flag = (name: string): string | undefined => cliFlag(`--${name}`, args);
const RUNS = Number(flag('runs') ?? 3);
const CLAIMERS = (flag('claimers') ?? '4,16').split(',').map(Number);
const LIMIT = Number(flag('limit') ?? 8);
const SECONDS = Number(flag('seconds') ?? 4);
const BACKLOG = 30_000;
const QUEUE = 'collide';

async function ledgerOf(root: string): Promise<LedgerClass> {
  const m = (await import(pathToFileURL(`${root}/src/ledger/ledger.ts`).href)) as { Ledger: LedgerClass };
  return m.Ledger;
}

async function once(code: string, Ledger: LedgerClass, claimers: number): Promise<Run> {
  const db = await createBenchDatabase('lwcc');
  try {
    const url = db.url;
    const setup = new Ledger({ url, poolSize: 4 });
    await setup.migrate();
    for (let i = 0; i < BACKLOG; i += 1000)
      await setup.enqueueMany(Array.from({ length: 1000 }, (_, n) => ({ queue: QUEUE, type: 't', payload: i + n })));
    await setup.close();
    const ledgers = Array.from({ length: claimers }, () => new Ledger({ url, poolSize: 2 }));
    let won = 0;
    let lost = 0;
    let rounds = 0;
    const end = Date.now() + SECONDS * 1000;
    await Promise.all(
      ledgers.map(async (l, k) => {
        while (Date.now() < end) {
          const r = await l.claim({ queue: QUEUE, owner: `c${k}`, limit: LIMIT, leaseMs: 60_000 });
          rounds++;
          won += r.items.length;
          lost += LIMIT - r.items.length;
          if (r.items.length > 0) await l.completeMany(r.items.map((handle) => ({ handle })));
        }
      }),
    );
    await Promise.all(ledgers.map((l) => l.close()));
    return { code, claimers, won, lost, rounds, perSecond: won / SECONDS };
  } finally {
    await db.drop();
  }
}

runBenchmark(async () => {
  const here = fileURLToPath(new URL('..', import.meta.url)).replace(/\/$/, '');
  const base = flag('base');
  const codes: [string, LedgerClass][] = [['head', await ledgerOf(here)]];
  if (base !== undefined) codes.push(['base', await ledgerOf(base)]);
  const runs: Run[] = [];
  for (let r = 0; r < RUNS; r++) {
    for (const claimers of CLAIMERS) {
      // Alternated: this round's order is the other way round from the last one's.
      const order = r % 2 === 0 ? codes : [...codes].reverse();
      for (const [code, Ledger] of order) {
        const run = await once(code, Ledger, claimers);
        runs.push(run);
        console.log(
          `${code} x${claimers}: ${run.won} won, ${(run.lost / Math.max(1, run.won)).toFixed(3)} lost per item, ${Math.round(run.perSecond)} items/s`,
        );
      }
    }
  }
  console.log(`\nmedians over ${RUNS} runs, limit ${LIMIT}, ${SECONDS} s each:`);
  for (const claimers of CLAIMERS) {
    for (const [code] of codes) {
      const mine = runs.filter((r) => r.code === code && r.claimers === claimers);
      const loss = median(mine.map((r) => r.lost / Math.max(1, r.won)));
      const rate = median(mine.map((r) => r.perSecond));
      console.log(
        `  ${code.padEnd(4)} ${String(claimers).padStart(2)} claimers: CAS losses per claimed item ${loss.toFixed(3)}, ${Math.round(rate)} items/s`,
      );
    }
  }
});
