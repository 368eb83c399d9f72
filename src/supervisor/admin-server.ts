import { createHash } from 'node:crypto';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { AdminAddressError, ValidationError } from '../errors.js';
import type { Ledger } from '../ledger/ledger.js';
import { createLogger, type Logger } from '../log.js';
import type { LanewakeMetrics } from './metrics.js';

export interface ReadinessCheckResult {
  ok: boolean;
  detail?: string;
}

export interface Readiness {
  ready: boolean;
  checks: Record<string, ReadinessCheckResult>;
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
  metrics: Pick<LanewakeMetrics, 'metrics' | 'contentType'>;
  readiness: () => Promise<Readiness>;
  /** What `/api/queues` serves and the dashboard renders (e.g. `ledger.stats()`). */
  queues: () => Promise<unknown>;
  /** What `/api/items/<id>` serves (an item without its handler data: `itemView`); undefined answers 404. */
  item?: (id: string) => Promise<unknown>;
  /** What `/api/consumers` serves: the live consumers (`ledger.liveConsumers()`). */
  consumers?: () => Promise<unknown>;
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
const ITEM_PATH = '/api/items/';
const DEFAULT_CHECK_TIMEOUT_MS = 2_000;

/**
 * The admin HTTP surface (docs/design.md, "Supervisor and operations"): `/livez`, `/readyz`, `/metrics`,
 * `/version`, `/api/queues`, `/api/consumers`, `/api/items/<id>` and a small dashboard at `/`. GET only; a
 * failing route answers 500 with a JSON error and the server keeps serving.
 */
export async function startAdminServer(options: AdminServerOptions): Promise<AdminServer> {
  const host = options.host ?? '127.0.0.1';
  const log = (options.logger ?? createLogger('lanewake.admin')).child({ component: 'admin' });

  const routes = new Map<string, (res: ServerResponse) => Promise<void>>([
    ['/livez', async (res) => send(res, 200, 'text/plain; charset=utf-8', 'ok\n')],
    [
      '/readyz',
      async (res) => {
        const r = await options.readiness();
        sendJson(res, r.ready ? 200 : 503, r);
      },
    ],
    ['/metrics', async (res) => send(res, 200, options.metrics.contentType, await options.metrics.metrics())],
    ['/version', async (res) => sendJson(res, 200, { name: 'lanewake', version: options.version, node: process.version })],
    ['/api/queues', async (res) => sendJson(res, 200, await options.queues())],
    ['/api/consumers', async (res) => sendJson(res, 200, options.consumers ? await options.consumers() : [])],
    [
      '/',
      async (res) => {
        res.setHeader('Content-Security-Policy', DASHBOARD_CSP);
        send(res, 200, 'text/html; charset=utf-8', DASHBOARD_HTML);
      },
    ],
  ]);

  const handle = async (req: IncomingMessage, res: ServerResponse): Promise<void> => {
    const path = pathOf(req.url);
    const itemRoute = options.item;
    const route =
      path === undefined
        ? undefined
        : path.startsWith(ITEM_PATH) && itemRoute !== undefined
          ? (res: ServerResponse) => serveItem(res, itemRoute, decodeURIComponent(path.slice(ITEM_PATH.length)))
          : routes.get(path);
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
      log.error({ path: pathOf(req.url), err: message }, 'admin route failed');
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
      reject(code !== undefined && code in BIND_FAILURES ? new AdminAddressError(host, options.port, code, BIND_FAILURES[code] ?? code, error) : error);
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

async function serveItem(res: ServerResponse, item: (id: string) => Promise<unknown>, id: string): Promise<void> {
  try {
    const found = await item(id);
    if (found === undefined) return sendJson(res, 404, { error: `no item ${id}` });
    sendJson(res, 200, found);
  } catch (error) {
    if (error instanceof ValidationError) return sendJson(res, 400, { error: error.message, fields: error.fields });
    throw error;
  }
}

/**
 * What an operator is shown of an item (`/api/items/<id>`): its fields,
 * progress, attempt history, the steps done and why it is where it is
 * (`ledger.explain`), without the handler's data (payload, checkpoint,
 * result, step results), which may hold what only the handler should see.
 */
export async function itemView(ledger: Pick<Ledger, 'inspect' | 'explain'>, id: string): Promise<unknown> {
  const found = await ledger.inspect(id);
  if (!found) return undefined;
  const why = await ledger.explain(id);
  const { payload: _payload, checkpoint: _checkpoint, result: _result, ...item } = found.item;
  return { item, attempts: found.attempts, steps: found.steps.map(({ result: _stepResult, ...step }) => step), why };
}

/**
 * Readiness of the ledger (docs/design.md, "Supervisor and operations"): reachable (a round trip through
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
          ? { ok: false, detail: `schema version ${s.current} is behind the required ${s.required}: run lanewake migrate` }
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

function pathOf(url: string | undefined): string | undefined {
  if (url === undefined) return undefined;
  try {
    return new URL(url, 'http://admin.invalid').pathname;
  } catch {
    return undefined;
  }
}

function send(res: ServerResponse, status: number, contentType: string, body: string): void {
  res.statusCode = status;
  res.setHeader('Content-Type', contentType);
  res.setHeader('Cache-Control', 'no-store');
  res.setHeader('X-Content-Type-Options', 'nosniff');
  res.end(body);
}

function sendJson(res: ServerResponse, status: number, value: unknown): void {
  // Serialize first: a value JSON cannot encode (a BigInt, a cycle) throws before any header is sent.
  const body = JSON.stringify(value ?? null);
  send(res, status, 'application/json; charset=utf-8', `${body}\n`);
}

const DASHBOARD_STYLE = `
body { font: 14px/1.4 system-ui, sans-serif; margin: 1.5rem; color: #1d2330; background: #f7f8fa; }
h1 { font-size: 1.2rem; margin: 0 0 .25rem; }
#status { color: #5b6475; margin-bottom: 1rem; }
#status.error { color: #b3261e; }
table { border-collapse: collapse; background: #fff; box-shadow: 0 1px 2px rgba(0,0,0,.08); }
th, td { padding: .35rem .75rem; border-bottom: 1px solid #e3e6eb; text-align: right; }
th:first-child, td:first-child { text-align: left; }
th { background: #eef1f5; font-weight: 600; }
td.zero { color: #a0a7b4; }
td.dead, td.blocked { color: #b3261e; font-weight: 600; }
`;

const DASHBOARD_SCRIPT = `
const ORDER = ['pending', 'processing', 'blocked', 'completed', 'skipped', 'dead', 'cancelled'];
const statusEl = document.getElementById('status');
const table = document.getElementById('queues');
function rowsOf(data) {
  if (Array.isArray(data)) return data;
  if (data && Array.isArray(data.queues)) return data.queues;
  return [];
}
function cell(tag, text, cls) {
  const el = document.createElement(tag);
  el.textContent = text;
  if (cls) el.className = cls;
  return el;
}
function render(data) {
  const rows = rowsOf(data).filter((r) => r && typeof r === 'object');
  const states = [];
  for (const r of rows) for (const s of Object.keys(r.counts || {})) if (!states.includes(s)) states.push(s);
  states.sort((a, b) => (ORDER.indexOf(a) + 1 || 99) - (ORDER.indexOf(b) + 1 || 99) || (a < b ? -1 : 1));
  const head = document.createElement('tr');
  head.append(cell('th', 'queue'), ...states.map((s) => cell('th', s)), cell('th', 'oldest due'));
  const body = rows.map((r) => {
    const tr = document.createElement('tr');
    tr.append(cell('td', String(r.queue ?? '?')));
    for (const s of states) {
      const n = Number((r.counts || {})[s] ?? 0);
      tr.append(cell('td', n.toLocaleString(), n === 0 ? 'zero' : s));
    }
    const age = Number(r.oldestDueAgeMs ?? 0);
    tr.append(cell('td', age > 0 ? (age / 1000).toFixed(1) + ' s' : '-', age > 0 ? '' : 'zero'));
    return tr;
  });
  table.replaceChildren(head, ...body);
  statusEl.className = '';
  statusEl.textContent = rows.length + ' queue(s), updated ' + new Date().toLocaleTimeString();
}
async function tick() {
  try {
    const res = await fetch('api/queues', { cache: 'no-store' });
    if (!res.ok) throw new Error('HTTP ' + res.status);
    render(await res.json());
  } catch (e) {
    statusEl.className = 'error';
    statusEl.textContent = 'refresh failed: ' + e.message + ' (retrying)';
  }
  setTimeout(tick, 2000);
}
tick();
`;

const sha256 = (text: string): string => `'sha256-${createHash('sha256').update(text).digest('base64')}'`;

/** Only the page's own inline script and style, and fetches to this server. */
const DASHBOARD_CSP = [
  "default-src 'none'",
  `script-src ${sha256(DASHBOARD_SCRIPT)}`,
  `style-src ${sha256(DASHBOARD_STYLE)}`,
  "connect-src 'self'",
  "base-uri 'none'",
  "form-action 'none'",
  "frame-ancestors 'none'",
].join('; ');

const DASHBOARD_HTML = `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>lanewake</title>
<style>${DASHBOARD_STYLE}</style>
</head>
<body>
<h1>lanewake queues</h1>
<div id="status">loading…</div>
<table id="queues"></table>
<script>${DASHBOARD_SCRIPT}</script>
</body>
</html>
`;
