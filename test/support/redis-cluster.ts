import { spawn, execFile, type ChildProcess } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import { openSync, closeSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { waitFor } from './ledger.js';

const exec = promisify(execFile);

export interface ClusterNodeInfo {
  port: number;
  id: string;
  role: 'master' | 'replica';
  /** For a replica, the id of its master. */
  masterId?: string;
  /** Slot ranges served (masters only), inclusive. */
  slots: [number, number][];
}

/** A local 6-node Redis Cluster (3 masters, 3 replicas) on free loopback ports, for tests. */
export interface LocalRedisCluster {
  ports: number[];
  /** `redis+cluster://127.0.0.1:p1,…` over every node. */
  url: string;
  dir: string;
  /** `redis-cli -p port args…`, stdout trimmed. */
  cli: (port: number, ...args: string[]) => Promise<string>;
  nodes: () => Promise<ClusterNodeInfo[]>;
  /** The master serving `key`'s slot (from a live node's view). */
  masterOf: (key: string) => Promise<ClusterNodeInfo>;
  /** SIGKILL one node. */
  kill: (port: number) => void;
  /**
   * SIGSTOP one node: it answers nothing and closes nothing, as a stalled or cut-off server;
   * `thaw` (SIGCONT) resumes it.
   */
  freeze: (port: number) => void;
  thaw: (port: number) => void;
  /** SIGKILL every node, and wait until all have exited. */
  killAll: () => Promise<void>;
  /** Starts every node that is not running again, on its port and with its nodes file (its data is gone). */
  restartAll: () => Promise<void>;
  /** Waits until every live node says cluster_state:ok and agrees that no master is on a dead node. */
  waitHealthy: (timeoutMs?: number) => Promise<void>;
  stop: () => Promise<void>;
}

async function portFree(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const s = createServer();
    s.once('error', () => resolve(false));
    s.listen(port, '127.0.0.1', () => s.close(() => resolve(true)));
  });
}

/** Six ports p with p and p + 10000 (the cluster bus) free. */
async function freePorts(n: number): Promise<number[]> {
  const out: number[] = [];
  let p = 20000 + Math.floor(Math.random() * 30000);
  while (out.length < n) {
    if (p > 55000) p = 20000;
    if ((await portFree(p)) && (await portFree(p + 10000))) out.push(p);
    p++;
  }
  return out;
}

export async function startRedisCluster(options: { nodeTimeoutMs?: number } = {}): Promise<LocalRedisCluster> {
  const dir = await mkdtemp(join(tmpdir(), 'lw-cluster-'));
  const ports = await freePorts(6);
  const procs = new Map<number, ChildProcess>();
  // Restarted on the same port with the same nodes file, a node keeps its id and its part of the cluster.
  const spawnNode = (port: number): void => {
    const log = openSync(join(dir, `redis-${port}.log`), 'a');
    const child = spawn(
      'redis-server',
      [
        '--cluster-enabled',
        'yes',
        '--port',
        String(port),
        '--bind',
        '127.0.0.1',
        '--cluster-config-file',
        join(dir, `nodes-${port}.conf`),
        '--cluster-node-timeout',
        String(options.nodeTimeoutMs ?? 1000),
        '--dir',
        dir,
        '--save',
        '',
        '--appendonly',
        'no',
        '--daemonize',
        'no',
        // A replica that never finished its first sync is not eligible for failover: sync at once.
        '--repl-diskless-sync-delay',
        '0',
      ],
      { stdio: ['ignore', log, log] },
    );
    closeSync(log);
    procs.set(port, child);
  };
  for (const port of ports) spawnNode(port);
  const cli = async (port: number, ...args: string[]): Promise<string> => {
    const { stdout } = await exec('redis-cli', ['-h', '127.0.0.1', '-p', String(port), ...args], { timeout: 10_000 });
    return stdout.trim();
  };
  const alive = (): number[] =>
    ports.filter((p) => procs.get(p)?.exitCode === null && procs.get(p)?.signalCode === null);
  const killAll = async (): Promise<void> => {
    for (const child of procs.values()) if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
    await Promise.all(
      [...procs.values()].map((c) =>
        c.exitCode !== null || c.signalCode !== null ? undefined : new Promise((r) => c.once('exit', r)),
      ),
    );
  };
  const stop = async (): Promise<void> => {
    await killAll();
    await rm(dir, { recursive: true, force: true });
  };
  try {
    await waitFor(
      async () => (await Promise.all(ports.map((p) => cli(p, 'ping').catch(() => '')))).every((r) => r === 'PONG'),
      10_000,
      'redis nodes up',
    );
    await exec(
      'redis-cli',
      ['--cluster', 'create', ...ports.map((p) => `127.0.0.1:${p}`), '--cluster-replicas', '1', '--cluster-yes'],
      {
        timeout: 30_000,
      },
    );
  } catch (error) {
    await stop();
    throw error;
  }

  const nodes = async (): Promise<ClusterNodeInfo[]> => {
    const live = alive();
    let text = '';
    for (const p of live) {
      text = await cli(p, 'cluster', 'nodes').catch(() => '');
      if (text !== '') break;
    }
    return text
      .split('\n')
      .filter((l) => l.trim() !== '')
      .map((line) => {
        const f = line.split(' ');
        const port = Number((f[1] ?? '').split('@')[0]?.split(':')[1]);
        const flags = f[2] ?? '';
        const slots = f
          .slice(8)
          .filter((s) => !s.startsWith('['))
          .map((s) => {
            const [a, b] = s.split('-');
            return [Number(a), Number(b ?? a)] as [number, number];
          });
        const role = flags.includes('master') ? 'master' : 'replica';
        return {
          port,
          id: f[0] ?? '',
          role,
          ...(role === 'replica' && f[3] ? { masterId: f[3] } : {}),
          slots,
        } satisfies ClusterNodeInfo;
      });
  };

  const waitHealthy = async (timeoutMs = 20_000): Promise<void> => {
    await waitFor(
      async () => {
        const live = alive();
        const states = await Promise.all(live.map((p) => cli(p, 'cluster', 'info').catch(() => '')));
        if (!states.every((s) => s.includes('cluster_state:ok'))) return false;
        const masters = (await nodes()).filter((n) => n.role === 'master' && n.slots.length > 0);
        return masters.length === 3 && masters.every((m) => live.includes(m.port));
      },
      timeoutMs,
      'cluster_state:ok on every node',
    );
  };
  await waitHealthy();
  await waitFor(
    async () => {
      const replicas = (await nodes()).filter((n) => n.role === 'replica');
      const links = await Promise.all(replicas.map((r) => cli(r.port, 'info', 'replication').catch(() => '')));
      return replicas.length === 3 && links.every((l) => l.includes('master_link_status:up'));
    },
    20_000,
    'every replica in sync with its master',
  ).catch(async (error: unknown) => {
    await stop();
    throw error;
  });

  return {
    ports,
    url: `redis+cluster://${ports.map((p) => `127.0.0.1:${p}`).join(',')}`,
    dir,
    cli,
    nodes,
    masterOf: async (key) => {
      const slot = Number(await cli(alive()[0] ?? ports[0]!, 'cluster', 'keyslot', key));
      const m = (await nodes()).find((n) => n.role === 'master' && n.slots.some(([a, b]) => slot >= a && slot <= b));
      if (!m) throw new Error(`no master serves slot ${slot}`);
      return m;
    },
    kill: (port) => {
      procs.get(port)?.kill('SIGKILL');
    },
    freeze: (port) => {
      procs.get(port)?.kill('SIGSTOP');
    },
    thaw: (port) => {
      procs.get(port)?.kill('SIGCONT');
    },
    killAll,
    restartAll: async () => {
      const down = ports.filter((p) => !alive().includes(p));
      for (const port of down) spawnNode(port);
      await waitFor(
        async () => (await Promise.all(down.map((p) => cli(p, 'ping').catch(() => '')))).every((r) => r === 'PONG'),
        10_000,
        'restarted nodes up',
      );
    },
    waitHealthy,
    stop,
  };
}
