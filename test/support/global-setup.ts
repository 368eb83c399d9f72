import type { TestProject } from 'vitest/node';

const LOCAL_MYSQL = process.env.LANEWAKE_TEST_MYSQL_URL ?? 'mysql://root@127.0.0.1:3306';
const LOCAL_REDIS = process.env.LANEWAKE_TEST_REDIS_URL ?? 'redis://127.0.0.1:6379';

/**
 * By default the suites use the local MariaDB and Redis. With
 * LANEWAKE_TEST_CONTAINERS=1 and a Docker engine, they run against TiDB and
 * Redis started by testcontainers instead; without an engine that request is
 * skipped with a message and the local services are used.
 */
export default async function setup(project: TestProject): Promise<() => Promise<void>> {
  let teardown = async (): Promise<void> => {};
  let mysqlUrl = LOCAL_MYSQL;
  let redisUrl = LOCAL_REDIS;
  if (process.env.LANEWAKE_TEST_CONTAINERS === '1') {
    const { startContainers } = await import('./containers.js');
    const started = await startContainers();
    if (started) {
      mysqlUrl = started.mysqlServerUrl;
      redisUrl = started.redisUrl;
      teardown = started.stop;
    }
  }
  project.provide('mysqlServerUrl', mysqlUrl);
  project.provide('redisUrl', redisUrl);
  return teardown;
}
