import { GenericContainer, getContainerRuntimeClient, Wait } from 'testcontainers';

export interface StartedServices {
  mysqlServerUrl: string;
  redisUrl: string;
  stop: () => Promise<void>;
}

const TIDB_IMAGE = process.env.LANEWAKE_TIDB_IMAGE ?? 'pingcap/tidb:v8.5.1';
const REDIS_IMAGE = process.env.LANEWAKE_REDIS_IMAGE ?? 'redis:7-alpine';

/** TiDB (standalone, unistore) and Redis in containers; undefined when no Docker engine answers. */
export async function startContainers(): Promise<StartedServices | undefined> {
  try {
    await getContainerRuntimeClient();
  } catch (error) {
    console.warn(
      `[lanewake tests] LANEWAKE_TEST_CONTAINERS=1 but no Docker engine is reachable (${(error as Error).message}); ` +
        'skipping the TiDB container path and using the local MariaDB and Redis.',
    );
    return undefined;
  }
  const tidb = await new GenericContainer(TIDB_IMAGE)
    .withExposedPorts(4000)
    .withWaitStrategy(Wait.forListeningPorts())
    .start();
  const redis = await new GenericContainer(REDIS_IMAGE).withExposedPorts(6379).start();
  return {
    mysqlServerUrl: `mysql://root@${tidb.getHost()}:${tidb.getMappedPort(4000)}`,
    redisUrl: `redis://${redis.getHost()}:${redis.getMappedPort(6379)}`,
    stop: async () => {
      await Promise.allSettled([tidb.stop(), redis.stop()]);
    },
  };
}
