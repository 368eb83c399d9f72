/**
 * Toxiproxy (github.com/Shopify/toxiproxy): a TCP proxy whose faults —
 * latency, resets, timeouts — are switched on and off over its HTTP API.
 * scripts/toxiproxy.sh builds the server once into a cache outside the
 * repository; this module starts it on a port of ours and drives it.
 */
import { execFile } from 'node:child_process';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { ManagedProcess, waitUntil } from './processes.js';

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '..');

export type ToxicType = 'latency' | 'reset_peer' | 'timeout' | 'slow_close' | 'bandwidth' | 'slicer' | 'limit_data';

export interface Toxic {
  name: string;
  type: ToxicType;
  /** downstream: server → client; upstream: client → server. */
  stream: 'upstream' | 'downstream';
  /** Share of connections the toxic applies to, 0–1. */
  toxicity: number;
  attributes: Record<string, number>;
}

/** Builds (first time) or finds toxiproxy-server; returns its path. */
export async function toxiproxyBinary(): Promise<string> {
  const { stdout } = await promisify(execFile)(join(ROOT, 'scripts', 'toxiproxy.sh'), [], {
    cwd: ROOT,
    maxBuffer: 1 << 20,
  });
  const path = stdout.trim().split('\n').pop() ?? '';
  if (!path) throw new Error('scripts/toxiproxy.sh printed no path');
  return path;
}

export class Toxiproxy {
  private constructor(
    readonly process: ManagedProcess,
    readonly apiUrl: string,
  ) {}

  static async start(binary: string, port: number, logFile: string): Promise<Toxiproxy> {
    const proc = new ManagedProcess('toxiproxy', binary, ['-host', '127.0.0.1', '-port', String(port)], { logFile });
    const proxy = new Toxiproxy(proc, `http://127.0.0.1:${port}`);
    await waitUntil(
      async () => (await proxy.version().catch(() => undefined)) !== undefined || proc.failIfExited(),
      15_000,
      'toxiproxy API',
    );
    return proxy;
  }

  async version(): Promise<string> {
    return (await this.request('GET', '/version')) as string;
  }

  /** A proxy from 127.0.0.1:listenPort to upstream; returns its listen address. */
  async createProxy(name: string, listenPort: number, upstream: string): Promise<void> {
    await this.request('POST', '/proxies', { name, listen: `127.0.0.1:${listenPort}`, upstream, enabled: true });
  }

  async addToxic(proxy: string, toxic: Toxic): Promise<void> {
    await this.request('POST', `/proxies/${proxy}/toxics`, toxic);
  }

  async removeToxic(proxy: string, name: string): Promise<void> {
    await this.request('DELETE', `/proxies/${proxy}/toxics/${name}`);
  }

  /** Every proxy enabled, every toxic gone. */
  async reset(): Promise<void> {
    await this.request('POST', '/reset');
  }

  async stop(): Promise<void> {
    await this.process.kill('SIGKILL');
  }

  private async request(method: string, path: string, body?: unknown): Promise<unknown> {
    const res = await fetch(this.apiUrl + path, {
      method,
      headers: body === undefined ? {} : { 'content-type': 'application/json' },
      ...(body === undefined ? {} : { body: JSON.stringify(body) }),
      signal: AbortSignal.timeout(5000),
    });
    const text = await res.text();
    if (!res.ok) throw new Error(`toxiproxy ${method} ${path}: ${res.status} ${text}`);
    if (text === '') return undefined;
    try {
      return JSON.parse(text) as unknown;
    } catch {
      return text;
    }
  }
}
