/**
 * The fleet of `lanewake worker` processes: the real CLI with a config file,
 * one slot per worker name (w0, w1, …). A slot's process may be killed and
 * started again; each start is a generation with its own pid and RSS figures.
 */
import { writeFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { probeFileOf } from './probe-records.js';
import { ManagedProcess, waitUntil, type Exit } from './processes.js';

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '..');
/** Preloaded into every worker: records its passes, claim rounds, wake reads and event-loop delay (chaos/probe.ts). */
const PROBE = pathToFileURL(join(ROOT, 'chaos', 'probe.ts')).href;

export interface FleetConfig {
  databaseUrl: string;
  redisUrl: string;
  keyPrefix: string;
  queue: string;
  concurrency: number;
  leaseMs: number;
  pollIntervalMs: number;
  reconcileIntervalMs: number;
  poolSize: number;
  runDir: string;
  /** Passed to the handlers (chaos/handlers.ts) as CHAOS_SABOTAGE. */
  sabotage?: string | undefined;
}

export interface Generation {
  worker: string;
  gen: number;
  pid: number;
  startedAtMs: number;
  readyAtMs: number | undefined;
  exitedAtMs: number | undefined;
  exit: Exit | undefined;
  /** How the run ended it: killed (SIGKILL fault), terminated (end of run), or undefined (on its own). */
  endedBy: 'sigkill' | 'terminated' | undefined;
  rssStartKiB: number | undefined;
  rssEndKiB: number | undefined;
  logFile: string;
}

export class WorkerSlot {
  current: ManagedProcess | undefined;
  generation: Generation | undefined;
  /** SIGSTOPped right now. */
  frozen = false;
  /** Down on purpose (between a kill and its restart, or after stop). */
  down = false;
  /** A start is in progress. */
  starting = false;
  private gen = 0;

  constructor(
    readonly name: string,
    private readonly fleet: Fleet,
  ) {}

  get ready(): boolean {
    return this.current?.running === true && this.generation?.readyAtMs !== undefined;
  }

  /** Starts a new generation and waits until it logs "worker started". */
  async start(timeoutMs = 60_000): Promise<Generation> {
    this.starting = true;
    try {
      return await this.startGeneration(timeoutMs);
    } finally {
      this.starting = false;
    }
  }

  private async startGeneration(timeoutMs: number): Promise<Generation> {
    this.gen++;
    const label = `${this.name}.g${this.gen}`;
    const logFile = join(this.fleet.config.runDir, `${label}.log`);
    let started = false;
    const env: NodeJS.ProcessEnv = {};
    // The config file is the whole configuration: no LANEWAKE_* from the caller's shell.
    for (const [k, v] of Object.entries(process.env)) if (!k.startsWith('LANEWAKE_')) env[k] = v;
    env.LANEWAKE_LOG_LEVEL = 'info';
    env.CHAOS_WORKER = label;
    env.CHAOS_PROBE_FILE = probeFileOf(this.fleet.config.runDir, label);
    if (this.fleet.config.sabotage) {
      env.CHAOS_SABOTAGE = this.fleet.config.sabotage;
      env.CHAOS_DATABASE_URL = this.fleet.config.databaseUrl;
    }
    const proc = new ManagedProcess(
      label,
      process.execPath,
      ['--import', 'tsx', '--import', PROBE, 'src/cli/main.ts', 'worker', '--config', this.fleet.configFile],
      {
        cwd: ROOT,
        env,
        logFile,
        onLine: (line) => {
          if (!started && line.includes('"msg":"worker started"')) started = true;
        },
      },
    );
    const g: Generation = {
      worker: this.name,
      gen: this.gen,
      pid: proc.pid,
      startedAtMs: Date.now(),
      readyAtMs: undefined,
      exitedAtMs: undefined,
      exit: undefined,
      endedBy: undefined,
      rssStartKiB: undefined,
      rssEndKiB: undefined,
      logFile,
    };
    this.current = proc;
    this.generation = g;
    this.frozen = false;
    this.down = false;
    this.fleet.generations.push(g);
    let lastRss: number | undefined;
    const sampler = setInterval(() => {
      lastRss = proc.rssKiB() ?? lastRss;
    }, 1000);
    void proc.exited.then((exit) => {
      clearInterval(sampler);
      g.exit = exit;
      g.exitedAtMs = Date.now();
      g.rssEndKiB ??= lastRss;
    });
    try {
      await waitUntil(() => started || proc.failIfExited(), timeoutMs, `${label} to start`, 25);
    } catch (error) {
      await proc.kill('SIGKILL');
      throw error;
    }
    g.readyAtMs = Date.now();
    this.fleet.startupMs.push(g.readyAtMs - g.startedAtMs);
    g.rssStartKiB = proc.rssKiB();
    return g;
  }

  /** SIGKILL (a fault): the generation ends with no chance to finalize anything. */
  async kill(): Promise<Generation | undefined> {
    const proc = this.current;
    const g = this.generation;
    if (!proc || !g || !proc.running) return undefined;
    this.down = true;
    g.endedBy = 'sigkill';
    g.rssEndKiB = proc.rssKiB();
    await proc.kill('SIGKILL');
    return g;
  }

  freeze(): void {
    this.current?.signal('SIGSTOP');
    this.frozen = true;
  }

  thaw(): void {
    this.current?.signal('SIGCONT');
    this.frozen = false;
  }

  /** SIGTERM (a graceful drain), SIGKILL after `graceMs`. */
  async terminate(graceMs: number): Promise<void> {
    const proc = this.current;
    const g = this.generation;
    this.down = true;
    if (!proc || !g || !proc.running) return;
    g.endedBy = 'terminated';
    g.rssEndKiB = proc.rssKiB();
    this.frozen = false;
    await proc.terminate(graceMs);
  }
}

export class Fleet {
  readonly slots: WorkerSlot[];
  readonly generations: Generation[] = [];
  /** Spawn to "worker started", of every start that got there. */
  readonly startupMs: number[] = [];
  readonly configFile: string;

  constructor(
    readonly config: FleetConfig,
    workers: number,
  ) {
    this.configFile = join(config.runDir, 'worker.json');
    const file = {
      databaseUrl: config.databaseUrl,
      redisUrl: config.redisUrl,
      redisKeyPrefix: config.keyPrefix,
      handlers: join(ROOT, 'chaos', 'handlers.ts'),
      poolSize: config.poolSize,
      reconcileIntervalMs: config.reconcileIntervalMs,
      drainTimeoutMs: 5000,
      retentionMs: 0,
      admin: false,
      queues: [
        {
          name: config.queue,
          concurrency: config.concurrency,
          leaseMs: config.leaseMs,
          pollIntervalMs: config.pollIntervalMs,
          backoff: { baseMs: 100, factor: 2, maxMs: 1000, jitter: 0.2 },
        },
      ],
    };
    writeFileSync(this.configFile, `${JSON.stringify(file, null, 2)}\n`);
    this.slots = Array.from({ length: workers }, (_, i) => new WorkerSlot(`w${i}`, this));
  }

  async startAll(): Promise<void> {
    await Promise.all(this.slots.map((s) => s.start()));
  }

  async stopAll(graceMs: number): Promise<void> {
    await Promise.all(this.slots.map((s) => s.terminate(graceMs)));
  }
}
