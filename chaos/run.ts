/**
 * `npm run chaos`: lanewake workers and a producer through a fault schedule,
 * then every invariant checked from the ledger and the recorded effects.
 * See docs/RELIABILITY.md; `npm run chaos -- --help` for the options.
 */
import { randomBytes } from 'node:crypto';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { RowDataPacket } from 'mysql2';
import { ChaosDatabase } from './database.js';
import { FaultLog, MYSQL_PROXY, REDIS_PROXY, runFaults, type FaultContext } from './faults.js';
import type { Check } from './check-kit.js';
import { computeFigures, rescueFigures, type Figures } from './figures.js';
import { checkInvariants } from './invariants.js';
import { CHAOS_QUEUE, seededRandom, type EnqueuedRecord } from './items.js';
import { HELP, OptionsError, parseChaosOptions, type ChaosOptions } from './options.js';
import { readProbes } from './probe-records.js';
import { freePort, killEverything, ManagedProcess, PrivateRedis, waitUntil } from './processes.js';
import type { ProducerConfig } from './producer.js';
import { readRecorded } from './recorded.js';
import { checkRescue, faultOfExpiries, reclaimWindowMs, type KillRescue } from './rescue.js';
import { Toxiproxy, toxiproxyBinary } from './toxiproxy.js';
import { Fleet } from './workers.js';

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const t0 = Date.now();
const say = (line: string): void => {
  process.stdout.write(`[chaos +${((Date.now() - t0) / 1000).toFixed(1).padStart(5)}s] ${line}\n`);
};

/** What was started, undone in reverse order whatever happens. */
const cleanups: { what: string; run: () => Promise<void> }[] = [];
let cleaning: Promise<void> | undefined;
function cleanup(): Promise<void> {
  cleaning ??= (async () => {
    while (cleanups.length > 0) {
      const c = cleanups.pop()!;
      try {
        await c.run();
      } catch (error) {
        process.stderr.write(`chaos: cleanup of ${c.what} failed: ${(error as Error).message}\n`);
      }
    }
    await killEverything();
  })();
  return cleaning;
}

/** Logs are kept after a failure (or with --keep); an interrupted run leaves nothing unless --keep. */
let keepRunDir = false;
let keepRequested = false;
let interrupted = false;
for (const signal of ['SIGINT', 'SIGTERM'] as const) {
  process.on(signal, () => {
    if (interrupted) process.exit(130);
    interrupted = true;
    keepRunDir = keepRequested;
    say(`${signal}: cleaning up`);
    void cleanup().finally(() => process.exit(130));
  });
}

interface Summary {
  ok: boolean;
  command: string;
  date: string;
  seed: number;
  options: ChaosOptions;
  wallSeconds: number;
  /**
   * Lease + reconcile interval + the passes' measured lateness: how long an expired lease may wait for its reclaim
   * (chaos/rescue.ts).
   */
  reclaimWindowMs: number;
  checks: Check[];
  figures: Figures;
  skippedFaults: string[];
  failedStarts: string[];
  producer: Record<string, unknown>;
  toxiproxy: { version: string; buildSeconds: number | null };
}

async function main(): Promise<number> {
  let options: ChaosOptions;
  try {
    const parsed = parseChaosOptions(process.argv.slice(2));
    if (parsed === 'help') {
      process.stdout.write(HELP);
      return 0;
    }
    options = parsed;
  } catch (error) {
    if (error instanceof OptionsError) {
      process.stderr.write(`chaos: ${error.message}\n\n${HELP}`);
      return 2;
    }
    throw error;
  }
  const runId = randomBytes(4).toString('hex');
  const runDir = mkdtempSync(join(tmpdir(), `lanewake-chaos-${runId}-`));
  keepRunDir = options.keep;
  keepRequested = options.keep;
  cleanups.push({
    what: 'run directory',
    run: async () =>
      keepRunDir ? say(`logs and records kept in ${runDir}`) : rmSync(runDir, { recursive: true, force: true }),
  });
  const random = seededRandom(options.seed);
  say(
    `${options.long ? 'long' : 'short'} form, seed ${options.seed}: ` +
      `${options.workers} workers x ${options.concurrency}, ${options.items} items ` +
      `over ${options.lanes} lanes, ` +
      `${options.faultSeconds} s of faults; lease ${options.leaseMs} ms, reconcile ` +
      `${options.reconcileIntervalMs} ms; run dir ${runDir}`,
  );

  // Toxiproxy, built once into the cache.
  const buildStart = Date.now();
  const binary = await toxiproxyBinary();
  const buildSeconds = Date.now() - buildStart > 2000 ? Math.round((Date.now() - buildStart) / 1000) : null;
  if (buildSeconds !== null) say(`built toxiproxy-server in ${buildSeconds} s: ${binary}`);
  const proxy = await Toxiproxy.start(binary, await freePort(), join(runDir, 'toxiproxy.log'));
  cleanups.push({ what: 'toxiproxy', run: () => proxy.stop() });
  const toxiproxyVersion = await proxy.version();

  const redis = new PrivateRedis(await freePort(), join(runDir, 'redis.log'));
  cleanups.push({ what: 'redis-server', run: () => redis.destroy() });
  await redis.start();

  const mysqlPort = await freePort();
  const redisProxyPort = await freePort();
  await proxy.createProxy(MYSQL_PROXY, mysqlPort, '127.0.0.1:3306');
  await proxy.createProxy(REDIS_PROXY, redisProxyPort, `127.0.0.1:${redis.port}`);

  const db = new ChaosDatabase(runId);
  cleanups.push({
    what: `database ${db.name}`,
    run: async () => (options.keep ? say(`database ${db.name} kept`) : db.drop()),
  });
  await db.create();
  say(
    `database ${db.name}, worker user ${db.user}; proxies: MariaDB :${mysqlPort}, ` +
      `Redis :${redisProxyPort} (redis-server :${redis.port})`,
  );

  const keyPrefix = `lwchaos:${runId}:`;
  const fleet = new Fleet(
    {
      databaseUrl: db.workerUrl(mysqlPort),
      redisUrl: `redis://127.0.0.1:${redisProxyPort}`,
      keyPrefix,
      queue: CHAOS_QUEUE,
      concurrency: options.concurrency,
      leaseMs: options.leaseMs,
      pollIntervalMs: options.pollIntervalMs,
      // The checks assume options.reconcileIntervalMs: with slow-reconcile the workers take twice that.
      reconcileIntervalMs: options.reconcileIntervalMs * (options.sabotage === 'slow-reconcile' ? 2 : 1),
      poolSize: options.poolSize,
      runDir,
      sabotage: options.sabotage === 'effect-outside-tx' ? options.sabotage : undefined,
    },
    options.workers,
  );
  cleanups.push({ what: 'workers', run: () => fleet.stopAll(2000) });
  await fleet.startAll();
  say(`${options.workers} workers started: ${fleet.slots.map((s) => `${s.name}=${s.current?.pid}`).join(' ')}`);

  // A worker that exits without being told to is restarted, and reported.
  // A start that fails (the ledger unreachable through a broken link: exit 1) is retried, and counted.
  const unplannedExits: string[] = [];
  const failedStarts: string[] = [];
  let watching = true;
  const watchdog = (async () => {
    while (watching) {
      for (const slot of fleet.slots) {
        if (slot.down || slot.starting || slot.current?.running) continue;
        const g = slot.generation;
        const what =
          `${slot.name}.g${g?.gen} (pid ${g?.pid}) ${JSON.stringify(g?.exit)}: ` + `${g ? lastLine(g.logFile) : ''}`;
        if (g?.readyAtMs === undefined) failedStarts.push(what);
        else unplannedExits.push(what);
        say(
          `${slot.name} ` +
            `${g?.readyAtMs === undefined ? 'failed to start' : 'exited by itself'} ` +
            `(${JSON.stringify(g?.exit)}): starting it again`,
        );
        await slot
          .start()
          .catch((error: unknown) => say(`restart of ${slot.name} failed: ${(error as Error).message}`));
      }
      await new Promise((r) => setTimeout(r, 500));
    }
  })();

  // The producer.
  const recordFile = join(runDir, 'enqueued.jsonl');
  writeFileSync(recordFile, '');
  const producerConfig: ProducerConfig = {
    databaseUrl: db.directUrl,
    redisUrl: `redis://127.0.0.1:${redisProxyPort}`,
    keyPrefix,
    items: options.items,
    lanes: options.lanes,
    windowMs: Math.round(options.faultSeconds * 1000 * 0.85),
    seed: options.seed,
    workMinMs: options.workMinMs,
    workMaxMs: options.workMaxMs,
    record: recordFile,
  };
  const producerEvents: Record<string, unknown>[] = [];
  const unacknowledged = new Set<number>();
  const producer = new ManagedProcess('producer', process.execPath, ['--import', 'tsx', 'chaos/producer.ts'], {
    cwd: ROOT,
    env: { ...process.env, CHAOS_PRODUCER: JSON.stringify(producerConfig), LANEWAKE_LOG_LEVEL: 'warn' },
    logFile: join(runDir, 'producer.log'),
    onLine: (line, stream) => {
      if (stream !== 'stdout' || !line.startsWith('{')) return;
      const event = JSON.parse(line) as Record<string, unknown>;
      producerEvents.push(event);
      if (event.event === 'unacknowledged') for (const k of event.ks as number[]) unacknowledged.add(k);
      if (event.event === 'progress')
        say(`producer: ${String(event.enqueued)} enqueued, ${String(event.failures)} failed batches so far`);
    },
  });
  cleanups.push({ what: 'producer', run: async () => void (await producer.kill('SIGKILL')) });
  await waitUntil(
    () => producerEvents.some((e) => e.event === 'ready') || producer.failIfExited(),
    60_000,
    'the producer',
  );

  // The faults.
  const faults = new FaultLog();
  let aborted = false;
  const ctx: FaultContext = {
    fleet,
    redis,
    proxy,
    db,
    leaseMs: options.leaseMs,
    random,
    log: say,
    stopped: () => aborted || interrupted,
    sabotage: options.sabotage,
  };
  try {
    await runFaults(ctx, options.faultSeconds * 1000, faults);
  } catch (error) {
    aborted = true;
    throw error;
  }
  say(
    `faults over: ${Object.entries(countKinds(faults))
      .map(([k, n]) => `${k} x${n}`)
      .join(', ')}`,
  );

  // Healthy again: every proxy clean, Redis up, every worker running.
  await proxy.reset();
  if (!redis.running) await redis.start();
  for (const slot of fleet.slots) if (slot.frozen) slot.thaw();

  const producerExit = await Promise.race([
    producer.exited,
    new Promise<undefined>((r) => setTimeout(() => r(undefined), 60_000)),
  ]);
  if (producerExit === undefined) {
    say('producer still enqueueing 60 s after the faults: stopping it');
    producer.signal('SIGTERM');
    await producer.exited;
  }
  const done = producerEvents.find((e) => e.event === 'done') ?? {};
  say(
    `producer done: ${String(done.enqueued ?? '?')} items, ` +
      `${String(done.failures ?? '?')} failed batches (retried with the same keys)`,
  );

  // Drain: every item terminal, within the drain time.
  const drainStart = Date.now();
  let open = Infinity;
  while (Date.now() - drainStart < options.drainSeconds * 1000 && !interrupted) {
    const rows = await db.query<RowDataPacket>(
      `SELECT COUNT(*) AS n FROM \`${db.name}\`.lw_items WHERE queue = ? AND state NOT ` +
        `IN ('completed', 'dead', 'cancelled', 'skipped')`,
      [CHAOS_QUEUE],
    );
    open = Number(rows[0]?.n ?? 0);
    if (open === 0) break;
    await new Promise((r) => setTimeout(r, 500));
  }
  say(
    open === 0
      ? `drained in ${((Date.now() - drainStart) / 1000).toFixed(1)} s`
      : `${open} items still open after ${options.drainSeconds} s of drain`,
  );

  watching = false;
  await watchdog;
  await fleet.stopAll(15_000);

  // The checks.
  const acknowledged = readFileSync(recordFile, 'utf8')
    .split('\n')
    .filter((l) => l.length > 0)
    .map((l) => JSON.parse(l) as EnqueuedRecord);
  const recorded = await readRecorded(db);
  const probes = readProbes(runDir);
  const reclaimWindow = reclaimWindowMs(probes, options.leaseMs, options.reconcileIntervalMs);
  const faultOf = faultOfExpiries(recorded, faults, reclaimWindow);
  const result = checkInvariants({
    recorded,
    acknowledged,
    unacknowledged,
    faults,
    faultOf,
    reclaimWindowMs: reclaimWindow,
  });
  const rescue = checkRescue({
    recorded,
    faults,
    probes,
    leaseMs: options.leaseMs,
    intervalMs: options.reconcileIntervalMs,
    faultOf,
  });
  const figures = computeFigures(
    recorded,
    result,
    rescueFigures(rescue, probes, faults),
    faults,
    fleet.generations,
    fleet.startupMs,
    acknowledged.length,
  );
  const checks = [...result.checks, ...rescue.checks];
  checks.push({
    name: 'workers exit only when the run ends them',
    ok: unplannedExits.length === 0,
    checked: fleet.generations.length,
    violations: unplannedExits.length,
    examples: unplannedExits.slice(0, 12),
  });
  const ok = checks.every((c) => c.ok);
  keepRunDir ||= !ok && !interrupted;
  if (!ok) {
    // The database is dropped with the run; what the checks read stays with the logs.
    writeFileSync(join(runDir, 'recorded.json'), JSON.stringify(recorded));
  }

  const summary: Summary = {
    ok,
    command: `npm run chaos -- ${process.argv.slice(2).join(' ')}`.trim(),
    date: new Date().toISOString(),
    seed: options.seed,
    options,
    wallSeconds: Math.round((Date.now() - t0) / 1000),
    reclaimWindowMs: Math.round(reclaimWindow),
    checks,
    figures,
    skippedFaults: faults.skipped,
    failedStarts,
    producer: done,
    toxiproxy: { version: toxiproxyVersion, buildSeconds },
  };
  writeFileSync(join(runDir, 'summary.json'), `${JSON.stringify(summary, null, 2)}\n`);
  writeFileSync(
    join(runDir, 'faults.json'),
    `${JSON.stringify({ phases: faults.phases, events: faults.events }, null, 2)}\n`,
  );
  writeFileSync(join(runDir, 'rescue.json'), `${JSON.stringify(rescue.kills.map(rounded), null, 1)}\n`);
  if (options.out) {
    const out = resolve(ROOT, options.out);
    mkdirSync(dirname(out), { recursive: true });
    writeFileSync(out, `${JSON.stringify(summary, null, 2)}\n`);
  }
  printSummary(summary, runDir);
  await db.close();
  return ok ? 0 : 1;
}

/** A rescue record with its times to 0.1 ms, for rescue.json. */
function rounded(k: KillRescue): unknown {
  return JSON.parse(
    JSON.stringify(k, (_key, v: unknown) =>
      typeof v === 'number' && !Number.isInteger(v) ? Math.round(v * 10) / 10 : v,
    ),
  );
}

function lastLine(file: string): string {
  try {
    return readFileSync(file, 'utf8').trim().split('\n').pop()?.slice(0, 200) ?? '';
  } catch {
    return '';
  }
}

function countKinds(log: FaultLog): Record<string, number> {
  const out: Record<string, number> = {};
  for (const e of log.events) out[e.kind] = (out[e.kind] ?? 0) + 1;
  return out;
}

function fmt(p: { n: number; p50: number | null; p99: number | null; max: number | null }): string {
  return p.n === 0 ? 'n=0' : `p50 ${p.p50} ms, p99 ${p.p99} ms, max ${p.max} ms (n=${p.n})`;
}

function printSummary(s: Summary, runDir: string): void {
  const f = s.figures;
  const lines: string[] = ['', `chaos ${s.ok ? 'PASSED' : 'FAILED'} (seed ${s.seed}, ${s.wallSeconds} s)`, ''];
  for (const c of s.checks) {
    lines.push(
      `  ${c.ok ? 'ok  ' : 'FAIL'}  ${c.name}  [${c.checked} ` +
        `checked${c.violations > 0 ? `, ${c.violations} violations` : ''}]`,
    );
    for (const e of c.examples) lines.push(`          ${e}`);
  }
  lines.push(
    '',
    `  items: ${f.items.acknowledged} acknowledged, ${f.items.completed} completed, ` +
      `${f.items.dead} dead (deliberate), ${f.items.other} other`,
    `  throughput: ${f.throughput.overallPerS}/s overall, ${f.throughput.duringFaultsPerS}/s during the faults`,
    `  enqueue -> start: ${fmt(f.enqueueToStartMs)}`,
    ...rescueLines(f),
    `  claims: ${f.attempts.claims} for ${f.items.acknowledged} items (${f.attempts.extraClaims} extra)`,
  );
  for (const [k, n] of Object.entries(f.attempts.spentByFaults)
    .sort((a, b) => b[1] - a[1])
    .slice(0, 8))
    lines.push(`    ${n} x ${k}`);
  const live = Object.entries(f.attempts.leaseExpiriesOnLiveWorkers);
  if (live.length > 0)
    lines.push(`  leases expired on live workers: ${live.map(([p, n]) => `${n} in "${p}"`).join(', ')}`);
  lines.push('  by phase (items enqueued in it: enqueue -> start; attempts ended in it: leases expired, other spent):');
  for (const [phase, p] of Object.entries(f.byPhase)) {
    lines.push(
      `    ${phase}: ${p.enqueued} items, ${fmt(p.enqueueToStartMs)}; ` +
        `${p.leasesExpired} leases expired, ${p.otherSpentAttempts} other attempts spent`,
    );
  }
  lines.push(`  worker start (spawn to "worker started"): ${fmt(f.workerStartupMs)}`);
  lines.push(
    `  faults: ${Object.entries(f.faults)
      .map(([k, n]) => `${k} x${n}`)
      .join(', ')}`,
  );
  if (s.skippedFaults.length > 0) lines.push(`  skipped: ${s.skippedFaults.join('; ')}`);
  if (s.failedStarts.length > 0)
    lines.push(
      `  worker starts that failed and were retried: ${s.failedStarts.length}`,
      ...s.failedStarts.slice(0, 5).map((x) => `    ${x}`),
    );
  const w0 = f.workers.filter((w) => w.worker === 'w0');
  lines.push(
    `  RSS of w0 (never killed): ` +
      `${w0.map((w) => `${w.rssStartMiB} -> ${w.rssEndMiB} MiB over ${w.lifetimeS} s`).join(', ')}`,
  );
  const warn = Object.entries(f.logs.warnOrWorse).sort((a, b) => b[1] - a[1]);
  if (warn.length > 0)
    lines.push(
      `  worker log lines at warn or worse: ${warn
        .slice(0, 8)
        .map(([m, n]) => `${n} x "${m}"`)
        .join(', ')}`,
    );
  if (!s.ok) lines.push('', `  logs, the producer's record and summary.json are in ${runDir}`);
  process.stdout.write(`${lines.join('\n')}\n`);
}

function rescueLines(f: Figures): string[] {
  const r = f.rescue;
  const h = r.healthy;
  return [
    `  SIGKILLs: ${r.kills}, holding ${r.itemsHeld} items when they died ` +
      `(${r.idleKills} on a healthy network held nothing)`,
    `  rescue after SIGKILL, healthy network (${h.items} items): ${fmt(h.rescueMs)}; ` +
      `bound per item ${fmt(h.rescueBoundMs)}`,
    `    (a) reclaim - lease end: ${fmt(h.reclaimLatenessMs)}; allowance ${fmt(h.reclaimAllowanceMs)}`,
    `        of it: timer lag ${fmt(h.timerLagMs)}; tail ${fmt(h.tailMs)}; pass work ${fmt(h.workMs)}`,
    `    announce after the reclaim's commit: ${fmt(h.announceMs)}`,
    `    (b) re-claim after the announcement: ${fmt(h.reclaimClaimMs)}; allowance ${fmt(h.reclaimClaimAllowanceMs)}`,
    `        re-claim after the reclaim's commit: ${fmt(h.claimAfterCommitMs)}`,
    ...(h.lateLeases > 0 ? [`    leases that ran past kill + lease: ${h.lateLeases}`] : []),
    ...r.perKill.map(
      (k) =>
        `    kill at ${k.at}: ${k.worker} held ${k.held}, ${k.healthy} on a healthy ` +
        `network${k.rescueMaxMs === null ? '' : `: rescue max ${k.rescueMaxMs} ms, `}` +
        (k.rescueMaxMs === null ? '' : `bound ${k.boundMinMs}-${k.boundMaxMs} ms`),
    ),
    `  rescue after SIGKILL during network faults: ${fmt(r.duringNetworkFaults.rescueMs)}`,
    `  rescue after SIGSTOP: ${fmt(r.sigstopRescueMs)}`,
    `  event-loop delay (max per 100 ms window), all workers: ` +
      `${fmt(r.eventLoopDelayMs.all)}; w0: ${fmt(r.eventLoopDelayMs.w0)}`,
  ];
}

let code = 1;
try {
  code = await main();
} catch (error) {
  if (!interrupted) process.stderr.write(`chaos: the run itself failed: ${(error as Error).stack ?? String(error)}\n`);
  if (!interrupted) keepRunDir = true;
  code = 1;
} finally {
  await cleanup();
}
process.exit(code);
