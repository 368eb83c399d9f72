import { pino, type Logger } from 'pino';

export type { Logger };

/** pino JSON to stderr; level from LANEWAKE_LOG_LEVEL (default info). Never log payloads. */
export function createLogger(name: string, level = process.env.LANEWAKE_LOG_LEVEL ?? 'info'): Logger {
  return pino({ name, level, base: { pid: process.pid } }, pino.destination(2));
}
