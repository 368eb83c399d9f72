import type { Ledger } from '../../src/ledger/ledger.js';
import { ledgerReadiness, startAdminServer, type AdminServer } from '../../src/supervisor/admin-server.js';
import type { WakeChannel } from '../../src/wake/wake-channel.js';
import type { TestScope } from './scope.js';

/** The admin server with the dashboard on `ledger` (an ephemeral port), closed after the test. */
export async function startTestDashboard(
  scope: TestScope,
  opts: { ledger: Ledger; wake?: WakeChannel; adminToken?: string; showPayloads?: boolean },
): Promise<AdminServer> {
  const server = await startAdminServer({
    port: 0,
    readiness: () => ledgerReadiness(opts.ledger),
    version: '0.0.0-test',
    dashboard: {
      backend: () => ({ ledger: opts.ledger, wake: opts.wake }),
      adminToken: opts.adminToken,
      showPayloads: opts.showPayloads,
    },
  });
  scope.cleanup(() => server.close());
  return server;
}
