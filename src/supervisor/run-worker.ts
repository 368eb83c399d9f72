import { createLogger, type Logger } from '../log.js';
import { packageVersion } from '../version.js';
import { startAdminServer, type AdminServer } from './admin-server.js';
import type { WorkerConfig } from './config.js';
import { loadHandlersModule, type HandlersByQueue } from './handlers-module.js';
import { LanewakeMetrics } from './metrics.js';
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
 * (unless handlers are given), starts the supervisor, its metrics and the
 * admin server. The caller owns signals and the process exit.
 */
export async function startWorker(config: WorkerConfig, opts: { handlers?: HandlersByQueue; logger?: Logger } = {}): Promise<RunningWorker> {
  const log = opts.logger ?? createLogger('lanewake.worker');
  const handlers = opts.handlers ?? (await loadHandlersModule(config.handlers));
  const metrics = new LanewakeMetrics();
  const supervisor = new Supervisor({
    config,
    handlers,
    logger: log,
    onConsumer: (consumer) => metrics.observeConsumer(consumer),
    afterReconcile: (ledger) => metrics.refreshDepth(ledger),
  });
  metrics.observeLedger(supervisor.ledger);
  await supervisor.start();
  let admin: AdminServer | undefined;
  try {
    admin =
      config.admin === false
        ? undefined
        : await startAdminServer({
            host: config.admin.host,
            port: config.admin.port,
            metrics,
            readiness: () => supervisor.readiness(),
            queues: () => supervisor.ledger.stats(),
            version: packageVersion(),
            logger: log,
          });
  } catch (error) {
    await supervisor.stop();
    throw error;
  }
  if (admin) log.info({ url: admin.url }, 'admin server listening');
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
