import type { IncomingMessage, ServerResponse } from 'node:http';
import { ValidationError } from '../errors.js';
import type { Logger } from '../log.js';
import { ACTION_ROUTES } from './actions.js';
import { HttpError, sendJson, segmentsOf, validationAnswer } from './http.js';
import { READ_ROUTES } from './read-api.js';
import { matchRoute, type DashboardOptions, type Route } from './routes.js';
import { StaticFiles } from './static-files.js';

export type { DashboardBackend, DashboardOptions } from './routes.js';

const ROUTES: readonly Route[] = [...READ_ROUTES, ...ACTION_ROUTES];

/** Answers the requests of the operator dashboard: its page, its bundle's assets and its API. */
export interface Dashboard {
  /**
   * Answers the request and returns true when it is the dashboard's (`/`, `/assets/*`, `/api/*`);
   * false leaves it to the caller.
   */
  handle(req: IncomingMessage, res: ServerResponse, url: URL): Promise<boolean>;
}

/**
 * The dashboard (docs/operations/observing.md, "The dashboard"): the static bundle,
 * the read API (read-api.ts) and the actions (actions.ts). A route's
 * ValidationError answers 400 naming the field; an HttpError its status.
 */
export function createDashboard(options: DashboardOptions, log: Logger): Dashboard {
  const files = new StaticFiles(options.staticDir);
  return {
    handle: async (req, res, url) => {
      const segments = segmentsOf(url.pathname);
      if (segments === undefined) return false;
      if (url.pathname === '/' || segments[0] === 'assets') {
        if (!isRead(req)) return methodNotAllowed(res, 'GET');
        if (url.pathname === '/') await files.index(res);
        else if (segments.length !== 2 || !(await files.asset(res, segments[1] ?? '')))
          sendJson(res, 404, { error: 'not found' });
        return true;
      }
      if (segments[0] !== 'api') return false;
      const rest = segments.slice(1);
      const matching = ROUTES.map((route) => ({ route, params: matchRoute(route.pattern, rest) })).filter(
        (m) => m.params !== undefined,
      );
      if (matching.length === 0) return false;
      const hit = matching.find(
        (m) => m.route.method === req.method || (m.route.method === 'GET' && req.method === 'HEAD'),
      );
      if (!hit) return methodNotAllowed(res, [...new Set(matching.map((m) => m.route.method))].join(', '));
      const backend = options.backend();
      try {
        if (!backend) throw new HttpError(503, { error: 'starting: the ledger is not open yet' });
        const value = await hit.route.run({
          req,
          res,
          params: hit.params ?? [],
          query: url.searchParams,
          backend,
          options,
          log,
        });
        sendJson(res, 200, value);
      } catch (error) {
        const answer = error instanceof ValidationError ? validationAnswer(error) : error;
        if (!(answer instanceof HttpError)) throw error;
        for (const [name, value] of Object.entries(answer.headers)) res.setHeader(name, value);
        sendJson(res, answer.status, answer.body);
      }
      return true;
    },
  };
}

function isRead(req: IncomingMessage): boolean {
  return req.method === 'GET' || req.method === 'HEAD';
}

function methodNotAllowed(res: ServerResponse, allow: string): true {
  res.setHeader('Allow', allow);
  sendJson(res, 405, { error: 'method not allowed' });
  return true;
}
