import { Cluster, Redis, type ClusterOptions, type RedisOptions } from 'ioredis';

/** A seed node of a Redis Cluster: the client learns the rest from it. */
export interface ClusterSeed {
  host: string;
  port: number;
}

/** A Redis Cluster: a seed list (any few nodes) and what every node connection shares. */
export interface ClusterTarget {
  cluster: readonly ClusterSeed[];
  username?: string;
  password?: string;
  tls?: boolean;
  /** Passed to ioredis's Cluster as they are (slotsRefreshInterval, natMap, …). */
  clusterOptions?: Omit<ClusterOptions, 'redisOptions'>;
}

/**
 * A plain Redis (a `redis://` / `rediss://` URL or ioredis options) or a
 * cluster (a `redis+cluster://host:port,host:port` / `rediss+cluster://` URL,
 * or a ClusterTarget).
 */
export type RedisTarget = string | RedisOptions | ClusterTarget;

/** Every Redis command of src/wake goes through one of these. */
export type RedisClient = Redis | Cluster;

const CLUSTER_SCHEMES = ['redis+cluster:', 'rediss+cluster:'];

export function isClusterUrl(url: string): boolean {
  return CLUSTER_SCHEMES.some((s) => url.toLowerCase().startsWith(`${s}//`));
}

/** `redis+cluster://[user:pass@]host:port,host:port[/]`, parsed by hand: `new URL` takes one host. */
export function parseClusterUrl(url: string): ClusterTarget {
  const scheme = CLUSTER_SCHEMES.find((s) => url.toLowerCase().startsWith(`${s}//`));
  if (scheme === undefined) throw new Error('not a redis+cluster:// URL');
  let rest = url.slice(scheme.length + 2);
  const end = rest.search(/[/?#]/);
  if (end >= 0) rest = rest.slice(0, end);
  const at = rest.lastIndexOf('@');
  const auth = at >= 0 ? rest.slice(0, at) : '';
  const hosts = at >= 0 ? rest.slice(at + 1) : rest;
  const cluster = hosts.split(',').map((h) => {
    const m = /^(\[[^\]]+\]|[^:]+)(?::(\d+))?$/.exec(h.trim());
    if (!m || m[1] === undefined) throw new Error(`bad cluster node '${h}' (want host:port)`);
    return { host: m[1].replace(/^\[|\]$/g, ''), port: m[2] !== undefined ? Number(m[2]) : 6379 };
  });
  if (cluster.length === 0) throw new Error('a cluster URL needs at least one host:port');
  const colon = auth.indexOf(':');
  const username = decodeURIComponent(colon >= 0 ? auth.slice(0, colon) : auth);
  const password = colon >= 0 ? decodeURIComponent(auth.slice(colon + 1)) : '';
  return {
    cluster,
    ...(username !== '' ? { username } : {}),
    ...(password !== '' ? { password } : {}),
    ...(scheme === 'rediss+cluster:' ? { tls: true } : {}),
  };
}

/** The cluster a target names, or undefined for a plain Redis. */
export function clusterOf(target: RedisTarget): ClusterTarget | undefined {
  if (typeof target === 'string') return isClusterUrl(target) ? parseClusterUrl(target) : undefined;
  return 'cluster' in target ? target : undefined;
}

/** A Cluster client of `c`; `node` goes to every node connection. */
export function createCluster(
  c: ClusterTarget,
  options: ClusterOptions,
  node: NonNullable<ClusterOptions['redisOptions']>,
): Cluster {
  return new Cluster(
    c.cluster.map((s) => ({ host: s.host, port: s.port })),
    {
      ...options,
      ...c.clusterOptions,
      redisOptions: {
        ...node,
        ...(c.username !== undefined ? { username: c.username } : {}),
        ...(c.password !== undefined ? { password: c.password } : {}),
        ...(c.tls === true ? { tls: {} } : {}),
      },
    },
  );
}

/**
 * How long a command may go unanswered before it fails. A Redis that is
 * frozen (stopped, stalled on a disk, cut off with no reset) answers
 * nothing and closes nothing, so without it an enqueue's offer look or
 * wake-up waited for as long as the freeze lasted. The commands lanewake
 * sends on a command client answer in milliseconds, and every one fails
 * soft (a wake-up not sent, an offer not taken), the ledger's sweep
 * covering it.
 */
const COMMAND_TIMEOUT_MS = 1_000;
/**
 * A blocking read (XREADGROUP/XREAD … BLOCK ms) that gets no answer this
 * long past its block is given up on by the client, and fails as unanswered
 * (readBlocking): a frozen Redis does not hold a reader, and its stop,
 * forever.
 */
const BLOCKING_GRACE_MS = 1_000;
/** The bound of a blocking read that names no block of its own (lanewake's all do). */
const UNBOUNDED_READ_LIMIT_MS = 60_000;

/** ioredis's message for a command that went unanswered past its timeout. */
const UNANSWERED = 'Command timed out';

/**
 * Whether a command failed because Redis did not answer it in COMMAND_TIMEOUT_MS (a frozen Redis), not because it
 * refused or the connection was gone.
 */
export function isUnanswered(error: unknown): boolean {
  return error instanceof Error && error.message === UNANSWERED;
}

/**
 * Whether `error` says a command on `client` went unanswered; if so, on a
 * cluster, the slots are read again. A frozen master closes nothing and sends
 * no MOVED, so the client would keep it as its slots' node for as long as the
 * freeze lasts, long after the cluster promoted its replica.
 */
export function afterUnanswered(client: RedisClient, error: unknown): boolean {
  if (!isUnanswered(error)) return false;
  if (client instanceof Cluster) client.refreshSlotsCache();
  return true;
}

/**
 * A blocking read (`read` sends it on `client`, blocking `blockMs`). An empty
 * reply that came back only because the client gave up on it (past its block
 * and BLOCKING_GRACE_MS) is thrown as unanswered, after afterUnanswered, so a
 * reader takes a frozen Redis for a gone one instead of an idle one.
 */
export async function readBlocking<T>(
  client: RedisClient,
  blockMs: number,
  read: () => Promise<T | null>,
): Promise<T | null> {
  const startedAtMs = performance.now();
  const reply = await read();
  // Half the grace as the line: the client's give-up timer is set from Date.now() and may end a millisecond
  // short of blockMs + BLOCKING_GRACE_MS as measured here, while a real empty reply comes at about blockMs.
  if (reply !== null || performance.now() - startedAtMs < blockMs + BLOCKING_GRACE_MS / 2) return reply;
  const error = new Error(UNANSWERED);
  afterUnanswered(client, error);
  throw error;
}

/** A command client, or one for blocking reads (each blocking reader needs its own connection). */
export type RedisClientUse = 'commands' | 'blocking';

/** The per-connection options of a client for `use`; for a cluster, those of every node connection. */
function connectionTimeouts(
  use: RedisClientUse,
): Pick<RedisOptions, 'commandTimeout' | 'blockingTimeout' | 'blockingTimeoutGrace'> {
  return use === 'commands'
    ? { commandTimeout: COMMAND_TIMEOUT_MS }
    : { blockingTimeout: UNBOUNDED_READ_LIMIT_MS, blockingTimeoutGrace: BLOCKING_GRACE_MS };
}

/**
 * A client whose commands fail fast while Redis is unreachable or frozen
 * (publishing a wake-up after a commit must never hang the producer): no
 * offline queue, one retry per command, a command timeout (COMMAND_TIMEOUT_MS)
 * or, for blocking reads, a bound past their block, and reconnecting
 * forever in the background. The publisher shares one; each blocking reader
 * (XREADGROUP/XREAD … BLOCK) needs its own.
 */
export function createRedisClient(target: RedisTarget, name: string, use: RedisClientUse): RedisClient {
  const c = clusterOf(target);
  const client = c
    ? createCluster(
        c,
        {
          clusterRetryStrategy: (times) => Math.min(1000, 50 * times),
          enableOfflineQueue: false,
          lazyConnect: false,
          // A command to a failed master is retried every 100 ms up to maxRedirections times (16 by
          // default: as long as a failover takes): 3 bounds a publish to ~300 ms, the sweep covers the rest.
          maxRedirections: 3,
        },
        { connectionName: name, maxRetriesPerRequest: 1, ...connectionTimeouts(use) },
      )
    : createPlainClient(target as string | RedisOptions, name, use);
  // Errors surface through the callers' commands; an unhandled 'error' event would crash the process.
  client.on('error', () => undefined);
  return client;
}

function createPlainClient(target: string | RedisOptions, name: string, use: RedisClientUse): Redis {
  const base: RedisOptions = {
    ...connectionTimeouts(use),
    connectionName: name,
    lazyConnect: false,
    retryStrategy: (times) => Math.min(1000, 50 * times),
    enableOfflineQueue: false,
    maxRetriesPerRequest: 1,
  };
  return typeof target === 'string' ? new Redis(target, base) : new Redis({ ...target, ...base });
}

/** Plain host/port options for libraries that take connection options rather than a client (BullMQ). */
export interface PlainRedisOptions {
  host: string;
  port: number;
  db?: number;
  username?: string;
  password?: string;
}

export function plainRedisOptions(target: string | RedisOptions): PlainRedisOptions {
  if (typeof target !== 'string') {
    return {
      host: target.host ?? '127.0.0.1',
      port: target.port ?? 6379,
      ...(target.db !== undefined ? { db: target.db } : {}),
      ...(target.username !== undefined ? { username: target.username } : {}),
      ...(target.password !== undefined ? { password: target.password } : {}),
    };
  }
  const u = new URL(target);
  const db = u.pathname.length > 1 ? Number(u.pathname.slice(1)) : undefined;
  return {
    host: u.hostname || '127.0.0.1',
    port: u.port ? Number(u.port) : 6379,
    ...(db !== undefined && Number.isInteger(db) ? { db } : {}),
    ...(u.username ? { username: decodeURIComponent(u.username) } : {}),
    ...(u.password ? { password: decodeURIComponent(u.password) } : {}),
  };
}

/** Resolves true once `client` is ready (at once if it is), false after `timeoutMs`. */
export function whenReady(client: RedisClient, timeoutMs: number): Promise<boolean> {
  if (client.status === 'ready') return Promise.resolve(true);
  if (client.status === 'end') return Promise.resolve(false);
  return new Promise((resolve) => {
    // A client closed meanwhile (disconnect()) will never be ready: its waiter is not held to the timeout.
    const settle = (ready: boolean) => {
      clearTimeout(timer);
      client.off('ready', onReady);
      client.off('end', onEnd);
      resolve(ready);
    };
    const onReady = () => settle(true);
    const onEnd = () => settle(false);
    const timer = setTimeout(() => settle(false), timeoutMs);
    client.once('ready', onReady);
    client.once('end', onEnd);
  });
}
