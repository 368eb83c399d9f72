/**
 * `lanewake demo`: the whole system under faults, against the local services.
 * A fresh database, 3 worker replicas as child processes, a mixed workload
 * over lanes, one replica SIGKILLed midway and replaced; then a summary whose
 * exactly-once and lane-order checks decide the exit code.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { SingleBar, Presets } from 'cli-progress';
import { sql } from 'kysely';
import { Ledger } from '../ledger/ledger.js';
import { ensureDatabase } from '../ledger/connection.js';
import { createLogger } from '../log.js';
import { Producer } from '../producer/producer.js';
import { WakeChannel } from '../wake/wake-channel.js';
import type { EnqueueInput } from '../ledger/ledger.js';
import { DEMO_QUEUE } from './handlers.js';

export interface DemoOptions {
  /** Server URL; the demo makes its own database on it. */
  serverUrl: string;
  redisUrl: string;
  items: number;
  lanes: number;
  replicas: number;
  keep: boolean;
  out: (line: string) => void;
  progress: boolean;
}

export interface DemoSummary {
  database: string;
  items: number;
  completed: number;
  dead: number;
  retries: number;
  releases: number;
  leaseReclaims: number;
  seconds: number;
  throughput: number;
  startP50Ms: number;
  startP99Ms: number;
  laneOrderViolations: number;
  duplicateEffects: number;
  missingEffects: number;
  killedReplica: string;
}

const here = fileURLToPath(new URL('.', import.meta.url));
const fromSource = import.meta.url.endsWith('.ts');

/** How a worker replica is started: the same code this process runs (TypeScript source or the built package). */
function workerCommand(): { cmd: string; args: string[]; handlers: string } {
  const main = join(here, '..', 'cli', fromSource ? 'main.ts' : 'main.js');
  const handlers = join(here, fromSource ? 'handlers.ts' : 'handlers.js');
  return { cmd: process.execPath, args: [...(fromSource ? ['--import', 'tsx'] : []), main, 'worker'], handlers };
}

/**
 * The replicas' environment: this process's, without the worker's own
 * LANEWAKE_* settings. Those override a config file, and the demo's user set
 * LANEWAKE_DATABASE_URL to name the server, not the demo's fresh database.
 */
function replicaEnv(): NodeJS.ProcessEnv {
  return Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith('LANEWAKE_')));
}

function mix(i: number): { type: string; share: string } {
  const r = (i * 2654435761) % 1000;
  if (r < 10) return { type: 'doomed', share: '1%' };
  if (r < 15) return { type: 'slow', share: '0.5%' };
  if (r < 75) return { type: 'flaky', share: '6%' };
  return { type: 'work', share: '92.5%' };
}

export async function runDemo(o: DemoOptions): Promise<DemoSummary> {
  const database = `lanewake_demo_${randomBytes(3).toString('hex')}`;
  const url = `${o.serverUrl.replace(/\/+$/, '')}/${database}`;
  const keyPrefix = `lwdemo:${randomBytes(3).toString('hex')}:`;
  const configDir = mkdtempSync(join(tmpdir(), 'lanewake-demo-'));
  const log = createLogger('lanewake.demo', 'warn');
  await ensureDatabase(url);
  const ledger = new Ledger({ url, poolSize: 4 });
  const wake = new WakeChannel({ redis: o.redisUrl, keyPrefix, logger: log });
  const replicas = new Map<string, ChildProcess>();
  try {
    const m = await ledger.migrate();
    o.out(`database ${database}: schema v${m.to}; redis key prefix ${keyPrefix}`);
    await sql`CREATE TABLE demo_effects (
      row_id BIGINT AUTO_INCREMENT PRIMARY KEY, item_id VARCHAR(32) NOT NULL, lane VARCHAR(255) NULL, lane_seq BIGINT NULL,
      replica VARCHAR(32) NOT NULL, started_us BIGINT NOT NULL, ended_us BIGINT NOT NULL, KEY ix_item (item_id), KEY ix_lane (lane, lane_seq)
    )`.execute(ledger.db);

    const configPath = join(configDir, 'worker.json');
    const worker = workerCommand();
    writeFileSync(
      configPath,
      JSON.stringify({
        databaseUrl: url,
        redisUrl: o.redisUrl,
        redisKeyPrefix: keyPrefix,
        handlers: worker.handlers,
        admin: false,
        reconcileIntervalMs: 500,
        drainTimeoutMs: 10_000,
        queues: [{ name: DEMO_QUEUE, concurrency: 32, leaseMs: 2_000, backoff: { baseMs: 100, factor: 2, maxMs: 1_000, jitter: 0.2 } }],
      }),
    );
    let serial = 0;
    /** A replica that exited without the demo stopping it (a bad config, a crash): the demo stops with its exit. */
    let unexpectedExit: string | undefined;
    const startReplica = (): string => {
      const name = `replica-${++serial}`;
      const child = spawn(worker.cmd, [...worker.args, '--config', configPath], {
        env: { ...replicaEnv(), LANEWAKE_DEMO_REPLICA: name, LANEWAKE_LOG_LEVEL: process.env.LANEWAKE_LOG_LEVEL ?? 'error' },
        stdio: ['ignore', 'ignore', 'pipe'],
      });
      // Its stderr is kept, not shown: it matters only if the replica exits on its own.
      let stderrTail = '';
      child.stderr?.on('data', (chunk: Buffer) => (stderrTail = (stderrTail + chunk.toString('utf8')).slice(-2000)));
      child.once('exit', (code, signal) => {
        if (replicas.get(name) === child) {
          unexpectedExit ??= `worker ${name} exited on its own (code ${code ?? '-'}, signal ${signal ?? '-'}): ${stderrTail.trim() || '(no output)'}`;
        }
      });
      replicas.set(name, child);
      return name;
    };
    for (let i = 0; i < o.replicas; i++) startReplica();
    o.out(`started ${o.replicas} worker replicas (child processes, concurrency 32 each)`);

    const producer = new Producer({ ledger, wake });
    const t0 = Date.now();
    const inputs: EnqueueInput[] = [];
    for (let i = 0; i < o.items; i++) {
      inputs.push({ queue: DEMO_QUEUE, type: mix(i).type, lane: `account-${i % o.lanes}`, payload: { n: i }, maxAttempts: 5 });
    }
    for (let i = 0; i < inputs.length; i += 500) await producer.enqueueMany(inputs.slice(i, i + 500));
    o.out(`enqueued ${o.items} items over ${o.lanes} lanes in ${Date.now() - t0} ms (92.5% work, 6% flaky, 1% doomed, 0.5% slower than the deadline)`);

    const bar = o.progress ? new SingleBar({ format: 'processing |{bar}| {percentage}% {value}/{total} finished | {note}', hideCursor: true }, Presets.shades_classic) : undefined;
    bar?.start(o.items, 0, { note: '' });
    let killed = '';
    let note = '';
    for (;;) {
      const [s] = await ledger.stats(DEMO_QUEUE);
      const finished = (s?.counts.completed ?? 0) + (s?.counts.dead ?? 0);
      if (unexpectedExit !== undefined) throw new Error(unexpectedExit);
      if (!killed && finished >= o.items * 0.4) {
        killed = 'replica-2';
        const victim = replicas.get(killed);
        replicas.delete(killed);
        victim?.kill('SIGKILL');
        const fresh = startReplica();
        note = `SIGKILLed ${killed} mid-flight, started ${fresh}`;
        if (!bar) o.out(note);
      }
      bar?.update(finished, { note });
      if (finished >= o.items) break;
      await new Promise((r) => setTimeout(r, 200));
    }
    bar?.stop();
    const seconds = (Date.now() - t0) / 1000;

    const stopping = [...replicas.entries()];
    replicas.clear();
    await Promise.all(
      stopping.map(
        ([name, child]) =>
          new Promise<void>((resolve) => {
            if (child.exitCode !== null || child.signalCode !== null) return resolve();
            child.once('exit', (code) => {
              if (code !== 0) o.out(`warning: ${name} exited with ${code}`);
              resolve();
            });
            child.kill('SIGTERM');
          }),
      ),
    );
    return { ...(await summarize(ledger, o.items)), database, seconds, throughput: o.items / seconds, killedReplica: killed };
  } finally {
    for (const child of replicas.values()) child.kill('SIGKILL');
    await wake.timers.close().catch(() => undefined);
    if (!o.keep) await wake.dropKeys().catch(() => undefined);
    await wake.close().catch(() => undefined);
    if (!o.keep) await sql`DROP DATABASE IF EXISTS ${sql.id(database)}`.execute(ledger.db).catch(() => undefined);
    await ledger.close();
    rmSync(configDir, { recursive: true, force: true });
  }
}

async function summarize(ledger: Ledger, items: number): Promise<Omit<DemoSummary, 'database' | 'seconds' | 'throughput' | 'killedReplica'>> {
  const t = ledger.tables;
  const [s] = await ledger.stats(DEMO_QUEUE);
  const history = await sql<{ outcome: string; n: number }>`SELECT outcome, COUNT(*) AS n FROM ${t.attempts} GROUP BY outcome`.execute(ledger.db);
  const count = (o: string): number => Number(history.rows.find((r) => r.outcome === o)?.n ?? 0);
  const latency = await sql<{ us: number }>`SELECT TIMESTAMPDIFF(MICROSECOND, created_at, started_at) AS us FROM ${t.items}
    WHERE queue = ${DEMO_QUEUE} AND state = 'completed' AND attempt = 1 ORDER BY us`.execute(ledger.db);
  const at = (p: number): number => Number(latency.rows[Math.min(latency.rows.length - 1, Math.floor((p / 100) * latency.rows.length))]?.us ?? 0) / 1000;
  // Per lane, in lane order, each effect must start after the previous one ended.
  const order = await sql<{ n: number }>`SELECT COUNT(*) AS n FROM (
      SELECT started_us, LAG(ended_us) OVER (PARTITION BY lane ORDER BY lane_seq) AS prev_end FROM demo_effects
    ) x WHERE prev_end IS NOT NULL AND started_us < prev_end`.execute(ledger.db);
  const dups = await sql<{ n: number }>`SELECT COUNT(*) AS n FROM (SELECT item_id FROM demo_effects GROUP BY item_id HAVING COUNT(*) > 1) d`.execute(ledger.db);
  const missing = await sql<{ n: number }>`SELECT COUNT(*) AS n FROM ${t.items} i
    WHERE i.queue = ${DEMO_QUEUE} AND i.state = 'completed' AND NOT EXISTS (SELECT 1 FROM demo_effects e WHERE e.item_id = i.id)`.execute(ledger.db);
  return {
    items,
    completed: s?.counts.completed ?? 0,
    dead: s?.counts.dead ?? 0,
    retries: count('retried'),
    releases: count('released'),
    leaseReclaims: count('lease_expired'),
    startP50Ms: at(50),
    startP99Ms: at(99),
    laneOrderViolations: Number(order.rows[0]?.n ?? 0),
    duplicateEffects: Number(dups.rows[0]?.n ?? 0),
    missingEffects: Number(missing.rows[0]?.n ?? 0),
  };
}
