/**
 * The rescue checks again, on a run kept with --keep (or kept after a
 * failure, before its database was dropped): its run directory's faults and
 * probe records, and its database. For looking into a rescue with the
 * records at hand, or trying a change to chaos/rescue.ts on a past run.
 *
 *   node --import tsx chaos/recheck.ts /tmp/lanewake-chaos-<run>-XXXXXX [--items]
 *
 * --items prints every followed item as one JSON line.
 */
import { readFileSync } from 'node:fs';
import { basename } from 'node:path';
import { ChaosDatabase } from './database.js';
import { FaultLog } from './faults.js';
import type { ChaosOptions } from './options.js';
import { readProbes } from './probe-records.js';
import { readRecorded } from './recorded.js';
import { checkRescue, faultOfExpiries, reclaimWindowMs } from './rescue.js';

const [runDir, flag] = process.argv.slice(2);
const runId = runDir ? /^lanewake-chaos-([0-9a-f]+)-/.exec(basename(runDir))?.[1] : undefined;
if (!runDir || !runId) {
  process.stderr.write('usage: node --import tsx chaos/recheck.ts <run directory> [--items]\n');
  process.exit(2);
}
const options = (JSON.parse(readFileSync(`${runDir}/summary.json`, 'utf8')) as { options: ChaosOptions }).options;
const saved = JSON.parse(readFileSync(`${runDir}/faults.json`, 'utf8')) as Pick<FaultLog, 'phases' | 'events'>;
const faults = new FaultLog();
faults.phases.push(...saved.phases);
faults.events.push(...saved.events);
const db = new ChaosDatabase(runId);
try {
  const recorded = await readRecorded(db);
  const probes = readProbes(runDir);
  const faultOf = faultOfExpiries(
    recorded,
    faults,
    reclaimWindowMs(probes, options.leaseMs, options.reconcileIntervalMs),
  );
  const r = checkRescue({
    recorded,
    faults,
    probes,
    leaseMs: options.leaseMs,
    intervalMs: options.reconcileIntervalMs,
    faultOf,
  });
  if (flag === '--items') for (const k of r.kills) process.stdout.write(`${JSON.stringify(k)}\n`);
  for (const c of r.checks) {
    process.stdout.write(`${c.ok ? 'ok  ' : 'FAIL'}  ${c.name}  [${c.checked} checked, ${c.violations} violations]\n`);
    for (const e of c.examples) process.stdout.write(`        ${e}\n`);
  }
} finally {
  await db.close();
}
