import type { IncomingMessage, ServerResponse } from 'node:http';
import type { ValidationError } from '../errors.js';

/** An answer other than 200 a route decides on: its status and JSON body. */
export class HttpError extends Error {
  constructor(
    readonly status: number,
    readonly body: Record<string, unknown>,
    readonly headers: Readonly<Record<string, string>> = {},
  ) {
    super(String(body.error ?? status));
  }
}

/** A bad field of a request: 400 `{ error, field }`. */
export function badRequest(field: string, message: string): HttpError {
  return new HttpError(400, { error: `invalid ${field} (${field}: ${message})`, field, fields: [field] });
}

/** A ValidationError as the 400 it answers: `{ error, field, fields }`. */
export function validationAnswer(error: ValidationError): HttpError {
  return new HttpError(400, { error: error.message, field: error.fields[0] ?? null, fields: error.fields });
}

export function send(
  res: ServerResponse,
  status: number,
  contentType: string,
  body: string | Buffer,
  cacheControl = 'no-store',
): void {
  res.statusCode = status;
  res.setHeader('Content-Type', contentType);
  res.setHeader('Cache-Control', cacheControl);
  res.setHeader('X-Content-Type-Options', 'nosniff');
  res.setHeader('Referrer-Policy', 'no-referrer');
  res.end(body);
}

export function sendJson(res: ServerResponse, status: number, value: unknown): void {
  // Serialize first: a value JSON cannot encode (a BigInt, a cycle) throws before any header is sent.
  const body = JSON.stringify(value ?? null);
  send(res, status, 'application/json; charset=utf-8', `${body}\n`);
}

const MAX_BODY_BYTES = 64 * 1024;

/** A request's body as a JSON object: 413 past 64 KiB, 400 naming `body` when it is not a JSON object. */
export async function readJsonObject(req: IncomingMessage): Promise<Record<string, unknown>> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of req) {
    const b = chunk as Buffer;
    size += b.length;
    if (size > MAX_BODY_BYTES) throw new HttpError(413, { error: `body over ${MAX_BODY_BYTES} bytes` });
    chunks.push(b);
  }
  const text = Buffer.concat(chunks).toString('utf8');
  let value: unknown;
  try {
    value = text.trim() === '' ? {} : JSON.parse(text);
  } catch {
    throw badRequest('body', 'is not JSON');
  }
  if (typeof value !== 'object' || value === null || Array.isArray(value))
    throw badRequest('body', 'must be a JSON object');
  return value as Record<string, unknown>;
}

/**
 * The path's segments, each percent-decoded (a lane name may hold '/', sent as %2F); undefined
 * when one cannot be decoded.
 */
export function segmentsOf(pathname: string): string[] | undefined {
  try {
    return pathname
      .split('/')
      .slice(1)
      .map((s) => decodeURIComponent(s));
  } catch {
    return undefined;
  }
}
