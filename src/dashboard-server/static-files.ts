import { readFile } from 'node:fs/promises';
import type { ServerResponse } from 'node:http';
import { extname } from 'node:path';
import { fileURLToPath } from 'node:url';
import { send } from './http.js';

/**
 * The built dashboard (`npm run build:dashboard`), resolved from this module, which is src/dashboard-server/ under tsx
 * and dist/dashboard-server/ once built (not dist/dashboard/: the bundle's own folder).
 */
export const DEFAULT_DASHBOARD_DIR = new URL('../../dist/dashboard/', import.meta.url);

/** No inline script or style, nothing from elsewhere: the bundle's own files and fetches to this server. */
export const DASHBOARD_CSP = [
  "default-src 'none'",
  "script-src 'self'",
  "style-src 'self'",
  "img-src 'self' data:",
  "connect-src 'self'",
  "font-src 'self'",
  "base-uri 'none'",
  "form-action 'none'",
  "frame-ancestors 'none'",
].join('; ');

const TYPES: Readonly<Record<string, string>> = {
  '.js': 'text/javascript; charset=utf-8',
  '.mjs': 'text/javascript; charset=utf-8',
  '.css': 'text/css; charset=utf-8',
  '.html': 'text/html; charset=utf-8',
  '.json': 'application/json; charset=utf-8',
  '.map': 'application/json; charset=utf-8',
  '.svg': 'image/svg+xml',
  '.png': 'image/png',
  '.ico': 'image/x-icon',
  '.woff2': 'font/woff2',
  '.woff': 'font/woff',
  '.txt': 'text/plain; charset=utf-8',
};

/** One file name under assets/: no directory, no dot first (so no '..'). */
const ASSET_NAME = /^[A-Za-z0-9_-][A-Za-z0-9._-]{0,199}$/;

/** Serves the bundle's index.html and assets/ from `dir` (a folder path or file: URL). */
export class StaticFiles {
  private readonly dir: string;

  constructor(dir: string | URL = DEFAULT_DASHBOARD_DIR) {
    const path = dir instanceof URL ? fileURLToPath(dir) : dir;
    this.dir = path.endsWith('/') ? path : `${path}/`;
  }

  /** `/`: index.html with the CSP, or 503 saying how to build it when the bundle is not there. */
  async index(res: ServerResponse): Promise<void> {
    res.setHeader('Content-Security-Policy', DASHBOARD_CSP);
    const html = await readIfThere(`${this.dir}index.html`);
    if (html === undefined) {
      send(res, 503, 'text/plain; charset=utf-8', 'The dashboard is not built: run npm run build:dashboard\n');
      return;
    }
    send(res, 200, 'text/html; charset=utf-8', html);
  }

  /** `/assets/<name>`: the file, cached for good (its name carries its content hash); false when there is none. */
  async asset(res: ServerResponse, name: string): Promise<boolean> {
    if (!ASSET_NAME.test(name)) return false;
    const body = await readIfThere(`${this.dir}assets/${name}`);
    if (body === undefined) return false;
    const type = TYPES[extname(name).toLowerCase()] ?? 'application/octet-stream';
    if (type.startsWith('text/html')) res.setHeader('Content-Security-Policy', DASHBOARD_CSP);
    send(res, 200, type, body, 'public, max-age=31536000, immutable');
    return true;
  }
}

async function readIfThere(path: string): Promise<Buffer | undefined> {
  try {
    return await readFile(path);
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    if (code === 'ENOENT' || code === 'ENOTDIR' || code === 'EISDIR') return undefined;
    throw error;
  }
}
