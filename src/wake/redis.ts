import { Redis, type RedisOptions } from 'ioredis';

export type RedisTarget = string | RedisOptions;

/**
 * A client whose commands fail fast while Redis is unreachable (publishing a
 * wake-up after a commit must never hang the producer): no offline queue, one
 * retry per command, reconnect forever in the background. The publisher
 * shares one; each blocking reader (XREADGROUP/XREAD … BLOCK) needs its own.
 */
export function createRedisClient(target: RedisTarget, name: string): Redis {
  const base: RedisOptions = {
    connectionName: name,
    lazyConnect: false,
    retryStrategy: (times) => Math.min(1000, 50 * times),
    enableOfflineQueue: false,
    maxRetriesPerRequest: 1,
  };
  const client = typeof target === 'string' ? new Redis(target, base) : new Redis({ ...target, ...base });
  // Errors surface through the callers' commands; an unhandled 'error' event would crash the process.
  client.on('error', () => undefined);
  return client;
}

/** Plain host/port options for libraries that take connection options rather than a client (BullMQ). */
export interface PlainRedisOptions {
  host: string;
  port: number;
  db?: number;
  username?: string;
  password?: string;
}

export function plainRedisOptions(target: RedisTarget): PlainRedisOptions {
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
export function whenReady(client: Redis, timeoutMs: number): Promise<boolean> {
  if (client.status === 'ready') return Promise.resolve(true);
  if (client.status === 'end') return Promise.resolve(false);
  return new Promise((resolve) => {
    const onReady = () => {
      clearTimeout(timer);
      resolve(true);
    };
    const timer = setTimeout(() => {
      client.off('ready', onReady);
      resolve(false);
    }, timeoutMs);
    client.once('ready', onReady);
  });
}
