/** The processes a chaos run starts, each tracked so that cleanup can end every one of them. */
import { spawn, type ChildProcess } from 'node:child_process';
import { createWriteStream, mkdtempSync, readFileSync, rmSync, type WriteStream } from 'node:fs';
import { connect } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

export interface Exit {
  code: number | null;
  signal: NodeJS.Signals | null;
}

const live = new Set<ManagedProcess>();

/** SIGKILL for every process this run started that is still alive (stopped ones too). */
export async function killEverything(): Promise<void> {
  await Promise.all([...live].map((p) => p.kill('SIGKILL')));
}

export async function waitUntil(
  check: () => Promise<boolean | void> | boolean | void,
  timeoutMs: number,
  what: string,
  everyMs = 50,
): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    if (await check()) return;
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await new Promise((r) => setTimeout(r, everyMs));
  }
}

export { freePort } from '../test/support/processes.js';

export interface ManagedOptions {
  env?: NodeJS.ProcessEnv;
  cwd?: string;
  /** stdout and stderr are appended here. */
  logFile: string;
  /** Called with every line of stdout and stderr. */
  onLine?: (line: string, stream: 'stdout' | 'stderr') => void;
}

/** A child process with its output in a log file, its exit as a promise, and its signals. */
export class ManagedProcess {
  readonly proc: ChildProcess;
  readonly exited: Promise<Exit>;
  readonly startedAt = Date.now();
  private readonly log: WriteStream;

  constructor(
    readonly label: string,
    command: string,
    args: readonly string[],
    options: ManagedOptions,
  ) {
    this.log = createWriteStream(options.logFile, { flags: 'a' });
    this.proc = spawn(command, [...args], {
      cwd: options.cwd,
      env: options.env ?? process.env,
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    live.add(this);
    this.exited = new Promise((resolve) => {
      this.proc.once('exit', (code, signal) => {
        live.delete(this);
        resolve({ code, signal });
      });
      this.proc.once('error', (error) => {
        this.log.write(`spawn failed: ${error.message}\n`);
        live.delete(this);
        resolve({ code: -1, signal: null });
      });
    });
    for (const stream of ['stdout', 'stderr'] as const) {
      let buffered = '';
      const s = this.proc[stream];
      s?.setEncoding('utf8');
      s?.on('data', (chunk: string) => {
        this.log.write(chunk);
        if (!options.onLine) return;
        buffered += chunk;
        for (let nl = buffered.indexOf('\n'); nl >= 0; nl = buffered.indexOf('\n')) {
          options.onLine(buffered.slice(0, nl), stream);
          buffered = buffered.slice(nl + 1);
        }
      });
    }
    void this.exited.then(() => this.log.end());
  }

  get pid(): number {
    return this.proc.pid ?? -1;
  }

  get running(): boolean {
    return this.proc.exitCode === null && this.proc.signalCode === null && live.has(this);
  }

  /** Throws if the process has exited: for readiness waits. */
  failIfExited(): false {
    if (!this.running)
      throw new Error(`${this.label} exited (code ${this.proc.exitCode}, signal ${this.proc.signalCode})`);
    return false;
  }

  signal(signal: NodeJS.Signals): void {
    if (this.running) this.proc.kill(signal);
  }

  async kill(signal: NodeJS.Signals = 'SIGKILL'): Promise<Exit> {
    if (this.running) this.proc.kill(signal);
    return this.exited;
  }

  /** SIGTERM, then SIGKILL after `graceMs`. */
  async terminate(graceMs: number): Promise<Exit> {
    if (!this.running) return this.exited;
    this.proc.kill('SIGCONT');
    this.proc.kill('SIGTERM');
    const timer = setTimeout(() => this.proc.kill('SIGKILL'), graceMs);
    try {
      return await this.exited;
    } finally {
      clearTimeout(timer);
    }
  }

  /** Resident set size in KiB (VmRSS), or undefined once the process is gone. */
  rssKiB(): number | undefined {
    try {
      const m = /^VmRSS:\s+(\d+)\s+kB/m.exec(readFileSync(`/proc/${this.pid}/status`, 'utf8'));
      return m ? Number(m[1]) : undefined;
    } catch {
      return undefined;
    }
  }
}

/** A redis-server of the run's own on its own port, which the faults stop and start again empty. */
export class PrivateRedis {
  private proc: ManagedProcess | undefined;
  private readonly dir = mkdtempSync(join(tmpdir(), 'lanewake-chaos-redis-'));

  constructor(
    readonly port: number,
    private readonly logFile: string,
  ) {}

  get running(): boolean {
    return this.proc?.running ?? false;
  }

  async start(): Promise<void> {
    if (this.running) throw new Error('private redis already running');
    const proc = new ManagedProcess(
      'redis-server',
      'redis-server',
      [
        '--port',
        String(this.port),
        '--bind',
        '127.0.0.1',
        '--save',
        '',
        '--appendonly',
        'no',
        '--daemonize',
        'no',
        '--dir',
        this.dir,
      ],
      { logFile: this.logFile },
    );
    this.proc = proc;
    await waitUntil(async () => (await ping(this.port)) || proc.failIfExited(), 10_000, `redis-server on ${this.port}`);
  }

  /** SIGKILL: no shutdown handshake; nothing is persisted, so the next start is empty. */
  async stop(): Promise<void> {
    await this.proc?.kill('SIGKILL');
  }

  async destroy(): Promise<void> {
    await this.stop();
    rmSync(this.dir, { recursive: true, force: true });
  }
}

/** PING over a raw socket: no client library, no reconnect logic to switch off. */
function ping(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = connect({ host: '127.0.0.1', port });
    const done = (ok: boolean): void => {
      socket.destroy();
      resolve(ok);
    };
    socket.setTimeout(500, () => done(false));
    socket.once('error', () => done(false));
    socket.once('connect', () => socket.write('PING\r\n'));
    socket.once('data', (d) => done(d.toString().startsWith('+PONG')));
  });
}
