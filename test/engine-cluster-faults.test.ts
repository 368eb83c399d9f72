import { afterAll, beforeAll, test } from 'vitest';
import { consumerKilledMidHandler, redisStoppedMidRun } from './support/fault-scenarios.js';
import { startRedisCluster, type LocalRedisCluster } from './support/redis-cluster.js';
import { testScope } from './support/scope.js';

// The engine's fault scenarios (test/support/fault-scenarios.ts) on a real 3-master, 3-replica
// Redis Cluster of this file's own, which the second test takes down whole and brings back.
let cluster: LocalRedisCluster;
const scope = testScope();
const { cleanup } = scope;

beforeAll(async () => {
  cluster = await startRedisCluster();
});
afterAll(async () => {
  await cluster?.stop();
});

test('on the cluster: a consumer process killed with SIGKILL mid-handler: its ' +
  'items are reclaimed after the lease and completed by the others, once', async () => {
  const tl = await scope.ledger();
  const tw = scope.wake(cluster.url);
  await consumerKilledMidHandler({ tl, tw, redisUrl: cluster.url, cleanup });
}, 90_000);

test('on the cluster: every node stopped mid-run: enqueue still commits, work ' +
  'completes by sweeping, wake-ups resume when the cluster returns', async () => {
  const tl = await scope.ledger();
  const redis = {
    url: cluster.url,
    kill: () => cluster.killAll(),
    start: async () => {
      await cluster.restartAll();
      await cluster.waitHealthy(30_000);
    },
  };
  await redisStoppedMidRun({ tl, redis, keyPrefix: `lwt:cf${Date.now().toString(36)}:`, cleanup });
}, 120_000);
