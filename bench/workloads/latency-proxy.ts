/**
 * A Toxiproxy in front of each SQL server for the latency workload (bench/workloads/latency.ts): a proxy per
 * server, a `latency` toxic on each direction (jitter 0), and a ping that
 * measures what the proxy really adds to a round trip. The Toxiproxy client
 * is the chaos harness's (chaos/toxiproxy.ts).
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { basename, dirname, join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { createConnection } from 'mysql2/promise';
import { freePort } from '../../chaos/processes.js';
import { Toxiproxy, toxiproxyBinary } from '../../chaos/toxiproxy.js';
import { median, percentile } from '../support.js';

/**
 * Added latency of one cell. Toxiproxy's latency is whole milliseconds, so
 * "0.5 ms per direction" is 1 ms on the way up and none on the way down: the
 * same 1 ms added to every round trip. Every exchange on a MySQL connection
 * is a request and its answer, so a client can only see the sum.
 */
export interface AddedLatency {
  /** As reported: added per direction, ms. */
  label: string;
  /** No proxy at all: the server's own port. */
  direct: boolean;
  upMs: number;
  downMs: number;
}

export function addedLatency(label: string): AddedLatency {
  if (label === 'direct') return { label, direct: true, upMs: 0, downMs: 0 };
  const ms = Number(label);
  if (!Number.isFinite(ms) || ms < 0)
    throw new Error(`latency ${label}: want a number of ms per direction, or "direct"`);
  if (Number.isInteger(ms)) return { label, direct: false, upMs: ms, downMs: ms };
  if (Number.isInteger(ms * 2)) return { label, direct: false, upMs: ms * 2, downMs: 0 };
  throw new Error(`latency ${label}: Toxiproxy adds whole milliseconds; per direction must be a multiple of 0.5`);
}

export class LatencyProxies {
  private readonly proxies = new Map<string, { port: number; upstream: string }>();
  /** The toxics on each proxy now. */
  private readonly toxics = new Map<string, string[]>();

  private constructor(
    readonly toxiproxy: Toxiproxy,
    readonly version: string,
    private readonly logDir: string,
  ) {}

  static async start(): Promise<LatencyProxies> {
    const binary = await toxiproxyBinary();
    const logDir = mkdtempSync(join(tmpdir(), 'lanewake-bench-latency-'));
    const toxiproxy = await Toxiproxy.start(binary, await freePort(), join(logDir, 'toxiproxy.log'));
    // The API answers its version as text in older releases, as {"version": …} in newer ones.
    const v: unknown = await toxiproxy.version();
    const reported =
      typeof v === 'object' && v !== null && 'version' in v ? String((v as { version: unknown }).version) : String(v);
    // A `go install` build reports "git"; scripts/toxiproxy.sh caches it under its release.
    const version = `${basename(dirname(binary))} (reports ${reported})`;
    return new LatencyProxies(toxiproxy, version, logDir);
  }

  /** A proxy named `name` in front of `serverUrl` (mysql://user@host:port); returns the URL through it. */
  async add(name: string, serverUrl: string): Promise<string> {
    const u = new URL(serverUrl);
    const port = await freePort();
    const upstream = `${u.hostname}:${u.port || 3306}`;
    await this.toxiproxy.createProxy(name, port, upstream);
    this.proxies.set(name, { port, upstream });
    u.hostname = '127.0.0.1';
    u.port = String(port);
    return u.toString().replace(/\/+$/, '');
  }

  /** Replaces every toxic of `name` with this cell's latency. */
  async set(name: string, l: AddedLatency): Promise<void> {
    for (const toxic of this.toxics.get(name) ?? []) await this.toxiproxy.removeToxic(name, toxic);
    const added: string[] = [];
    this.toxics.set(name, added);
    for (const [stream, ms] of [
      ['upstream', l.upMs],
      ['downstream', l.downMs],
    ] as const) {
      if (ms === 0) continue;
      const toxic = `latency_${stream}`;
      await this.toxiproxy.addToxic(name, {
        name: toxic,
        type: 'latency',
        stream,
        toxicity: 1,
        attributes: { latency: ms, jitter: 0 },
      });
      added.push(toxic);
    }
  }

  async stop(): Promise<void> {
    await this.toxiproxy.stop();
    rmSync(this.logDir, { recursive: true, force: true });
  }
}

/** `SELECT 1` round trips on one connection, one after another: p50 and p99 in ms. */
export async function pingRoundTrip(serverUrl: string, count: number): Promise<{ p50: number; p99: number }> {
  const u = new URL(serverUrl);
  const c = await createConnection({
    host: u.hostname,
    port: Number(u.port || 3306),
    user: decodeURIComponent(u.username || 'root'),
    password: decodeURIComponent(u.password),
  });
  try {
    for (let i = 0; i < 10; i++) await c.query('SELECT 1');
    const times: number[] = [];
    for (let i = 0; i < count; i++) {
      const t0 = performance.now();
      await c.query('SELECT 1');
      times.push(performance.now() - t0);
    }
    return { p50: median(times), p99: percentile(times, 99) };
  } finally {
    await c.end().catch(() => undefined);
  }
}
