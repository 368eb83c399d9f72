import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach } from 'vitest';
import type { Ledger } from '../../src/ledger/ledger.js';
import { ledgerReadiness, startAdminServer, type AdminServer } from '../../src/supervisor/admin-server.js';
import { LanewakeMetrics } from '../../src/supervisor/metrics.js';
import { createTestLedger, type TestLedger } from './ledger.js';

/**
 * Call once at a test file's top level (test/admin-*.test.ts): ledgers and admin servers of the test's own, and
 * `cleanups` for anything else; after each test, last acquired is first released.
 */
export function adminScope(): {
  cleanups: (() => Promise<void>)[];
  testLedger: (migrate?: boolean) => Promise<TestLedger>;
  server: (
    options: Partial<Parameters<typeof startAdminServer>[0]> & { ledger: Ledger; metrics?: LanewakeMetrics },
  ) => Promise<AdminServer>;
} {
  const cleanups: (() => Promise<void>)[] = [];
  afterEach(async () => {
    // Last acquired, first released: servers and consumers before the ledgers they use.
    for (const c of cleanups.splice(0).reverse()) await c();
  });

  async function testLedger(migrate = true): Promise<TestLedger> {
    const tl = await createTestLedger({}, migrate);
    cleanups.push(tl.drop);
    return tl;
  }

  async function server(
    options: Partial<Parameters<typeof startAdminServer>[0]> & { ledger: Ledger; metrics?: LanewakeMetrics },
  ): Promise<AdminServer> {
    const { ledger, ...rest } = options;
    const s = await startAdminServer({
      port: 0,
      metrics: rest.metrics ?? new LanewakeMetrics({ defaultMetrics: false }),
      readiness: () => ledgerReadiness(ledger),
      dashboard: { backend: () => ({ ledger }), staticDir: join(tmpdir(), 'lanewake-no-dashboard-bundle') },
      version: '9.8.7-test',
      ...rest,
    });
    cleanups.push(() => s.close());
    return s;
  }

  return { cleanups, testLedger, server };
}
