import { createLogger, type Logger } from '../log.js';
import { packageVersion } from '../version.js';
import { startAdminServer, type AdminServer, type Readiness } from './admin-server.js';
import type { WorkerConfig } from './config.js';
import { loadHandlersModule, type HandlersByQueue } from './handlers-module.js';
import { LanewakeMetrics } from './metrics.js';
import { forgetQueueSeries } from './metric-series.js';
import { Supervisor } from './supervisor.js';

export interface RunningWorker {
  supervisor: Supervisor;
  metrics: LanewakeMetrics;
  admin: AdminServer | undefined;
  /** Graceful stop (drain); resolves with the exit code. */
  stop(): Promise<number>;
  /** The exit code once the worker has stopped by itself or through stop(). */
  done: Promise<number>;
}

/**
 * `lanewake worker` without the process plumbing: loads the handler module
 * (unless handlers are given), binds the admin server, then starts the
 * supervisor and its metrics. The admin address is bound first so that a
 * worker that cannot serve it (the port is taken) fails before it claims
 * anything; /readyz answers 503 until the supervisor has started. The caller
 * owns signals and the process exit.
 */
export async function startWorker(
  config: WorkerConfig,
  opts: { handlers?: HandlersByQueue; logger?: Logger } = {},
): Promise<RunningWorker> {
  const log = opts.logger ?? createLogger('lanewake.worker');
  const handlers = opts.handlers ?? (await loadHandlersModule(config.handlers));
  const metrics = new LanewakeMetrics();
  let started: Supervisor | undefined;
  const admin =
    config.admin === false
      ? undefined
      : await startAdminServer({
          host: config.admin.host,
          port: config.admin.port,
          metrics,
          readiness: () => started?.readiness() ?? Promise.resolve(NOT_STARTED),
          // The dashboard reads and acts through the supervisor's ledger and wake channel, once it has started.
          dashboard: {
            backend: () => (started ? { ledger: started.ledger, wake: started.wake } : undefined),
            adminToken: config.adminToken,
            showPayloads: config.showPayloads,
          },
          version: packageVersion(),
          logger: log,
        });
  let supervisor: Supervisor | undefined;
  try {
    supervisor = new Supervisor({
      config,
      handlers,
      logger: log,
      onConsumer: (consumer) => metrics.observeConsumer(consumer),
      onQueueGone: (queue) => forgetQueueSeries(metrics.registry, queue),
      afterReconcile: async (ledger) =>
        void (await metrics.refreshFleetGauges(ledger, { everyMs: config.reconcileIntervalMs })),
      beforeLedgerClose: (ledger) => metrics.releaseFleetGauges(ledger),
    });
    metrics.observeLedger(supervisor.ledger);
    await supervisor.start();
  } catch (error) {
    await supervisor?.stop();
    await admin?.close();
    throw error;
  }
  started = supervisor;
  const done = supervisor.done.then(async (code) => {
    await admin?.close();
    return code;
  });
  return {
    supervisor,
    metrics,
    admin,
    done,
    stop: async () => {
      await supervisor.stop();
      return done;
    },
  };
}

const NOT_STARTED: Readiness = { ready: false, checks: { started: { ok: false, detail: 'starting' } } };
