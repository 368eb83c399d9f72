import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { createDashboard, type DashboardOptions } from '../dashboard-server/dashboard.js';
import { send, sendJson } from '../dashboard-server/http.js';
import { AdminAddressError } from '../errors.js';
import type { Ledger } from '../ledger/ledger.js';
import { createLogger, type Logger } from '../log.js';
import type { LanewakeMetrics } from './metrics.js';
import type { ServedQueue } from './queue-patterns.js';

export interface ReadinessCheckResult {
  ok: boolean;
  detail?: string;
}

export interface Readiness {
  ready: boolean;
  checks: Record<string, ReadinessCheckResult>;
  /** A worker's: the queues it serves and why (supervisor/queue-patterns.ts). */
  queues?: ServedQueue[];
}

/** One extra readiness check (e.g. ownership of a queue); a throw counts as not ok. */
export interface NamedReadinessCheck {
  name: string;
  check: () => Promise<ReadinessCheckResult>;
}

export interface AdminServerOptions {
  /** Default 127.0.0.1: the admin surface is not meant for the open network. */
  host?: string;
  /** 0 = an ephemeral port (see `url`). */
  port: number;
  /** What `/metrics` serves; without it, /metrics is not served (the standalone `lanewake dashboard`). */
  metrics?: Pick<LanewakeMetrics, 'metrics' | 'contentType'> | undefined;
  readiness: () => Promise<Readiness>;
  /** The operator dashboard at `/`, `/assets/*` and `/api/*` (src/dashboard-server/); without it, none of them. */
  dashboard?: Omit<DashboardOptions, 'version'> | undefined;
  version: string;
  logger?: Logger;
}

export interface AdminServer {
  /** http://host:port with the port actually bound. */
  url: string;
  port: number;
  /** Stops accepting, lets requests in progress finish (up to 2 s), then closes every connection. */
  close(): Promise<void>;
}

const BIND_FAILURES: Readonly<Record<string, string>> = {
  EADDRINUSE: 'the address is in use (another worker on this host?)',
  EACCES: 'not permitted to bind it',
  EADDRNOTAVAIL: 'not an address of this host',
  ENOTFOUND: 'the host name does not resolve',
  EAI_AGAIN: 'the host name does not resolve',
};

const CLOSE_GRACE_MS = 2_000;
const DEFAULT_CHECK_TIMEOUT_MS = 2_000;

/**
 * The admin HTTP surface (docs/design/supervisor.md, "Supervisor and operations"): `/livez`, `/readyz`, `/metrics`,
 * `/version`, and the operator dashboard (src/dashboard-server/: its page, assets, read API and actions; the
 * actions are its only POSTs). A failing route answers 500 with a JSON error and the server keeps serving.
 */
export async function startAdminServer(options: AdminServerOptions): Promise<AdminServer> {
  const host = options.host ?? '127.0.0.1';
  const log = (options.logger ?? createLogger('lanewake.admin')).child({ component: 'admin' });

  const metrics = options.metrics;
  const routes = new Map<string, (res: ServerResponse) => Promise<void>>([
    ['/livez', async (res) => send(res, 200, 'text/plain; charset=utf-8', 'ok\n')],
    [
      '/readyz',
      async (res) => {
        const r = await options.readiness();
        sendJson(res, r.ready ? 200 : 503, r);
      },
    ],
    [
      '/version',
      async (res) => sendJson(res, 200, { name: 'lanewake', version: options.version, node: process.version }),
    ],
  ]);
  if (metrics) routes.set('/metrics', async (res) => send(res, 200, metrics.contentType, await metrics.metrics()));
  const dashboard =
    options.dashboard === undefined
      ? undefined
      : createDashboard({ ...options.dashboard, version: options.version }, log);

  const handle = async (req: IncomingMessage, res: ServerResponse): Promise<void> => {
    const url = urlOf(req.url);
    if (url === undefined) return sendJson(res, 404, { error: 'not found' });
    if (dashboard && (await dashboard.handle(req, res, url))) return;
    const route = routes.get(url.pathname);
    if (!route) return sendJson(res, 404, { error: 'not found' });
    if (req.method !== 'GET') {
      res.setHeader('Allow', 'GET');
      return sendJson(res, 405, { error: 'method not allowed' });
    }
    await route(res);
  };

  const server = createServer((req, res) => {
    handle(req, res).catch((error: unknown) => {
      const message = error instanceof Error ? error.message : String(error);
      log.error({ path: urlOf(req.url)?.pathname, err: message }, 'admin route failed');
      if (res.headersSent) {
        res.destroy();
        return;
      }
      // Headers a route set before failing (e.g. the dashboard's CSP) do not belong on the error.
      for (const name of res.getHeaderNames()) res.removeHeader(name);
      sendJson(res, 500, { error: message });
    });
  });
  server.on('clientError', (_error, socket) => {
    if (socket.writable) socket.end('HTTP/1.1 400 Bad Request\r\nConnection: close\r\n\r\n');
    else socket.destroy();
  });

  await new Promise<void>((resolve, reject) => {
    const onError = (error: Error): void => {
      const code = (error as NodeJS.ErrnoException).code;
      reject(
        code !== undefined && code in BIND_FAILURES
          ? new AdminAddressError(host, options.port, code, BIND_FAILURES[code] ?? code, error)
          : error,
      );
    };
    server.once('error', onError);
    server.listen(options.port, host, () => {
      server.off('error', onError);
      resolve();
    });
  });
  server.on('error', (error) => log.error({ err: error.message }, 'admin server error'));

  const address = server.address() as AddressInfo;
  const shownHost = address.family === 'IPv6' ? `[${address.address}]` : address.address;
  const url = `http://${shownHost}:${address.port}`;
  log.info({ url }, 'admin server listening');

  let closing: Promise<void> | undefined;
  return {
    url,
    port: address.port,
    close: () => {
      closing ??= new Promise<void>((resolve) => {
        const force = setTimeout(() => server.closeAllConnections(), CLOSE_GRACE_MS);
        server.close(() => {
          clearTimeout(force);
          resolve();
        });
        server.closeIdleConnections();
      });
      return closing;
    },
  };
}

/**
 * Readiness of the ledger (docs/design/supervisor.md, "Supervisor and operations"): reachable (a round trip through
 * `ledger.now()`) and migrations current (`schemaStatus`), plus `extra`
 * checks (ownership, added by the supervisor). Never throws: a failing or
 * hanging check (past `timeoutMs`) is reported as not ok with a detail.
 */
export async function ledgerReadiness(
  ledger: Pick<Ledger, 'now' | 'schemaStatus'>,
  extra: readonly NamedReadinessCheck[] = [],
  opts: { timeoutMs?: number } = {},
): Promise<Readiness> {
  const timeoutMs = opts.timeoutMs ?? DEFAULT_CHECK_TIMEOUT_MS;
  const all: NamedReadinessCheck[] = [
    {
      name: 'ledger',
      check: async () => {
        await ledger.now();
        return { ok: true };
      },
    },
    {
      name: 'migrations',
      check: async () => {
        const s = await ledger.schemaStatus();
        return s.behind
          ? {
              ok: false,
              detail: `schema version ${s.current} is behind the required ${s.required}: run lanewake migrate`,
            }
          : { ok: true, detail: `schema version ${s.current}` };
      },
    },
    ...extra,
  ];
  const results = await Promise.all(all.map(async (c) => [c.name, await runCheck(c, timeoutMs)] as const));
  const checks: Record<string, ReadinessCheckResult> = {};
  for (const [name, result] of results) {
    const prior = checks[name];
    // A repeated name must not let a passing check hide a failing one.
    checks[name] = prior && !prior.ok ? prior : result;
  }
  return { ready: Object.values(checks).every((c) => c.ok), checks };
}

async function runCheck(c: NamedReadinessCheck, timeoutMs: number): Promise<ReadinessCheckResult> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<ReadinessCheckResult>((resolve) => {
    timer = setTimeout(() => resolve({ ok: false, detail: `no answer within ${timeoutMs} ms` }), timeoutMs);
  });
  const run = async (): Promise<ReadinessCheckResult> => {
    try {
      const r: unknown = await c.check();
      if (typeof r !== 'object' || r === null) return { ok: false, detail: 'check returned no result' };
      const { ok, detail } = r as { ok?: unknown; detail?: unknown };
      return detail === undefined ? { ok: ok === true } : { ok: ok === true, detail: String(detail) };
    } catch (error) {
      return { ok: false, detail: error instanceof Error ? error.message || error.name : String(error) };
    }
  };
  try {
    return await Promise.race([run(), timeout]);
  } finally {
    clearTimeout(timer);
  }
}

function urlOf(url: string | undefined): URL | undefined {
  if (url === undefined) return undefined;
  try {
    return new URL(url, 'http://admin.invalid');
  } catch {
    return undefined;
  }
}
