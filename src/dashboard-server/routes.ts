import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Ledger } from '../ledger/ledger.js';
import type { Logger } from '../log.js';
import type { WakeChannel } from '../wake/wake-channel.js';

/** What the dashboard reads and acts through; undefined while the worker is still starting. */
export interface DashboardBackend {
  ledger: Ledger;
  /** Announces replays, pauses, cancels on Redis as the CLI does; without it consumers learn at their next sweep. */
  wake?: WakeChannel | undefined;
}

export interface DashboardOptions {
  backend: () => DashboardBackend | undefined;
  /** Without one the dashboard is read-only: every POST answers 403. */
  adminToken?: string | undefined;
  /** Show item payloads in `/api/items/<id>`. */
  showPayloads?: boolean | undefined;
  /** The built bundle's folder (default: dist/dashboard/ of this package). */
  staticDir?: string | URL | undefined;
  version: string;
}

/** One request as a route sees it. */
export interface RouteContext {
  req: IncomingMessage;
  res: ServerResponse;
  /** The path's parameters, in order (a queue, an id, a lane). */
  params: string[];
  query: URLSearchParams;
  backend: DashboardBackend;
  options: DashboardOptions;
  log: Logger;
}

export interface Route {
  method: 'GET' | 'POST';
  /** The path's segments after /api/, with ':' for a parameter. */
  pattern: readonly string[];
  /** The JSON answered with 200 (a route answers otherwise by throwing an HttpError). */
  run: (ctx: RouteContext) => Promise<unknown>;
}

/** The parameters of `segments` under `pattern`, or undefined when it does not match. */
export function matchRoute(pattern: readonly string[], segments: readonly string[]): string[] | undefined {
  if (pattern.length !== segments.length) return undefined;
  const params: string[] = [];
  for (let i = 0; i < pattern.length; i++) {
    const p = pattern[i];
    const s = segments[i] ?? '';
    if (p === ':') params.push(s);
    else if (p !== s) return undefined;
  }
  return params;
}
