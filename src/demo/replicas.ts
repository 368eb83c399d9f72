/**
 * The demo's worker replicas: child processes running `lanewake worker` on the
 * same code this process runs, each told apart by LANEWAKE_DEMO_REPLICA.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

const here = fileURLToPath(new URL('.', import.meta.url));
const fromSource = import.meta.url.endsWith('.ts');

/** How a worker replica is started: the same code this process runs (TypeScript source or the built package). */
function workerCommand(): { cmd: string; args: string[] } {
  const main = join(here, '..', 'cli', fromSource ? 'main.ts' : 'main.js');
  return { cmd: process.execPath, args: [...(fromSource ? ['--import', 'tsx'] : []), main, 'worker'] };
}

/** The demo's handler module, for the workers' config. */
export function demoHandlersPath(): string {
  return join(here, fromSource ? 'handlers.ts' : 'handlers.js');
}

/**
 * The replicas' environment: this process's, without the worker's own
 * LANEWAKE_* settings. Those override a config file, and the demo's user set
 * LANEWAKE_DATABASE_URL to name the server, not the demo's fresh database.
 */
function replicaEnv(): NodeJS.ProcessEnv {
  return Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith('LANEWAKE_')));
}

function exited(child: ChildProcess): boolean {
  return child.exitCode !== null || child.signalCode !== null;
}

/** Resolves once `child` has exited (at once if it has). */
function exitOf(child: ChildProcess): Promise<void> {
  return exited(child) ? Promise.resolve() : new Promise((resolve) => child.once('exit', () => resolve()));
}

/** How long a replica asked to stop on an interruption may drain before it is killed. */
const INTERRUPT_GRACE_MS = 5_000;

export class DemoReplicas {
  /** The replicas the demo runs, by name (a killed one leaves at once). */
  private readonly running = new Map<string, ChildProcess>();
  /** Every child not yet exited, killed or not. */
  private readonly alive = new Set<ChildProcess>();
  private serial = 0;
  /** Why a replica exited without the demo stopping it (a bad config, a crash), if one did. */
  unexpectedExit: string | undefined;
  /**
   * SIGKILLs every replica not yet exited; also run if this process exits by any path (a third
   * signal, an uncaught error).
   */
  readonly killAll = (): void => {
    for (const child of this.alive) child.kill('SIGKILL');
  };

  constructor(private readonly configPath: string) {
    process.once('exit', this.killAll);
  }

  /** Starts one replica; answers its name and pid. */
  start(): { name: string; pid: number | undefined } {
    const name = `replica-${++this.serial}`;
    const worker = workerCommand();
    const child = spawn(worker.cmd, [...worker.args, '--config', this.configPath], {
      env: {
        ...replicaEnv(),
        LANEWAKE_DEMO_REPLICA: name,
        LANEWAKE_LOG_LEVEL: process.env.LANEWAKE_LOG_LEVEL ?? 'error',
      },
      stdio: ['ignore', 'ignore', 'pipe'],
    });
    // Its stderr is kept, not shown: it matters only if the replica exits on its own.
    let stderrTail = '';
    child.stderr?.on('data', (chunk: Buffer) => (stderrTail = (stderrTail + chunk.toString('utf8')).slice(-2000)));
    this.alive.add(child);
    child.once('exit', (code, signal) => {
      this.alive.delete(child);
      if (this.running.get(name) === child) {
        this.unexpectedExit ??=
          `worker ${name} exited on its own (code ${code ?? '-'}, signal ` +
          `${signal ?? '-'}): ${stderrTail.trim() || '(no output)'}`;
      }
    });
    this.running.set(name, child);
    return { name, pid: child.pid };
  }

  /** SIGKILLs one replica mid-flight (the demo's fault); it is no longer the demo's. */
  kill(name: string): void {
    const victim = this.running.get(name);
    this.running.delete(name);
    victim?.kill('SIGKILL');
  }

  /** Drains every replica (SIGTERM) and waits for each to exit; `warn` hears of a non-zero exit. */
  async drain(warn: (line: string) => void): Promise<void> {
    const stopping = [...this.running.entries()];
    this.running.clear();
    await Promise.all(
      stopping.map(async ([name, child]) => {
        const done = exitOf(child);
        child.once('exit', (code) => code !== 0 && code !== null && warn(`warning: ${name} exited with ${code}`));
        if (!exited(child)) child.kill('SIGTERM');
        await done;
      }),
    );
  }

  /**
   * Stops every replica still running on an interruption or a failure: SIGTERM,
   * then SIGKILL after a grace; resolves once each has exited, so none outlives the demo.
   */
  async stop(): Promise<void> {
    this.running.clear();
    await Promise.all(
      [...this.alive].map(async (child) => {
        const done = exitOf(child);
        if (exited(child)) return;
        child.kill('SIGTERM');
        const timer = setTimeout(() => child.kill('SIGKILL'), INTERRUPT_GRACE_MS);
        await done;
        clearTimeout(timer);
      }),
    );
    process.off('exit', this.killAll);
  }
}
