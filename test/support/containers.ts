export interface StartedServices {
  mysqlServerUrl: string;
  redisUrl: string;
  stop: () => Promise<void>;
}

const TIDB_IMAGE = process.env.LANEWAKE_TIDB_IMAGE ?? 'pingcap/tidb:v8.5.1';
const REDIS_IMAGE = process.env.LANEWAKE_REDIS_IMAGE ?? 'redis:7-alpine';

/**
 * TiDB (standalone, unistore) and Redis in containers, for LANEWAKE_TEST_CONTAINERS=1. Throws when they
 * cannot be had (no Docker engine answers, or testcontainers does not load on this Node): a run that asked
 * for TiDB must fail, never pass on the local MariaDB instead.
 */
export async function startContainers(): Promise<StartedServices> {
  let tc: typeof import('testcontainers');
  try {
    tc = await import('testcontainers');
  } catch (error) {
    throw new Error(
      `LANEWAKE_TEST_CONTAINERS=1 asks for the TiDB and Redis containers, but testcontainers does not load ` +
        `on Node ${process.version} (${String(error)}), so no Docker engine can be reached. ` +
        ('Use a Node that testcontainers supports, or unset ' +
          'LANEWAKE_TEST_CONTAINERS to run against the local MariaDB and Redis.'),
      { cause: error },
    );
  }
  try {
    await tc.getContainerRuntimeClient();
  } catch (error) {
    throw new Error(
      `LANEWAKE_TEST_CONTAINERS=1 asks for the TiDB and Redis containers, but no Docker engine is reachable ` +
        `(${(error as Error).message}). Start a Docker engine, or unset LANEWAKE_TEST_CONTAINERS to run ` +
        'against the local MariaDB and Redis.',
      { cause: error },
    );
  }
  const tidb = await new tc.GenericContainer(TIDB_IMAGE)
    .withExposedPorts(4000)
    .withWaitStrategy(tc.Wait.forListeningPorts())
    .start();
  const redis = await new tc.GenericContainer(REDIS_IMAGE).withExposedPorts(6379).start();
  return {
    mysqlServerUrl: `mysql://root@${tidb.getHost()}:${tidb.getMappedPort(4000)}`,
    redisUrl: `redis://${redis.getHost()}:${redis.getMappedPort(6379)}`,
    stop: async () => {
      await Promise.allSettled([tidb.stop(), redis.stop()]);
    },
  };
}
