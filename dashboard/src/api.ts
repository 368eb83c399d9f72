import { currentCredentials, forgetToken, type Credentials } from './session.js';

/** An answer other than 2xx: the status and the server's `error` (and `field` for a 400). */
export class ApiError extends Error {
  constructor(
    readonly status: number,
    message: string,
    readonly field?: string,
  ) {
    super(message);
  }
}

async function errorOf(res: Response): Promise<ApiError> {
  let message = `${res.status} ${res.statusText}`;
  let field: string | undefined;
  try {
    const body = (await res.json()) as { error?: unknown; field?: unknown };
    if (typeof body.error === 'string') message = body.error;
    if (typeof body.field === 'string') field = body.field;
  } catch {
    // not JSON: the status line says enough
  }
  return new ApiError(res.status, message, field);
}

export async function getJson<T>(path: string): Promise<T> {
  const res = await fetch(path, { headers: { accept: 'application/json' }, cache: 'no-store' });
  if (!res.ok) throw await errorOf(res);
  return (await res.json()) as T;
}

/** Header values must be Latin-1: a name outside printable ASCII goes percent-encoded. */
function actorHeader(name: string): string {
  return /^[\x20-\x7e]*$/.test(name) ? name : encodeURIComponent(name);
}

/**
 * A POST of an action with the operator's token and name; a refused token (401) is forgotten so
 * the next action asks again.
 */
export async function postAction<T>(
  path: string,
  body: unknown,
  creds: Credentials | null = currentCredentials(),
): Promise<T> {
  const headers: Record<string, string> = { 'content-type': 'application/json', accept: 'application/json' };
  if (creds !== null) {
    headers['x-lanewake-admin-token'] = creds.token;
    if (creds.name !== '') headers['x-lanewake-actor'] = actorHeader(creds.name);
  }
  const res = await fetch(path, { method: 'POST', headers, body: JSON.stringify(body), cache: 'no-store' });
  if (!res.ok) {
    if (res.status === 401) forgetToken();
    throw await errorOf(res);
  }
  return (await res.json()) as T;
}

export function query(params: Record<string, string | number | undefined | null>): string {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) if (v !== undefined && v !== null && v !== '') q.set(k, String(v));
  const s = q.toString();
  return s === '' ? '' : `?${s}`;
}

export const enc = encodeURIComponent;
