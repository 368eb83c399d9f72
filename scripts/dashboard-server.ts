import type { Ledger } from '../src/ledger/ledger.js';
import { ledgerReadiness, startAdminServer, type AdminServer } from '../src/supervisor/admin-server.js';
import type { WakeChannel } from '../src/wake/wake-channel.js';
import { packageVersion } from '../src/version.js';

/** The admin server with the dashboard on the demo ledger, on an ephemeral port of 127.0.0.1. */
export function startDemoServer(opts: { ledger: Ledger; wake: WakeChannel; adminToken: string }): Promise<AdminServer> {
  return startAdminServer({
    port: 0,
    readiness: () => ledgerReadiness(opts.ledger),
    version: packageVersion(),
    dashboard: {
      backend: () => ({ ledger: opts.ledger, wake: opts.wake }),
      adminToken: opts.adminToken,
      showPayloads: true,
    },
  });
}
