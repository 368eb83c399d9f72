import { pino, type DestinationStream, type Logger } from 'pino';

export type { Logger };

/**
 * An embedding application hears only what needs its attention: the library
 * logs at warn unless told otherwise. `lanewake worker` raises this to info,
 * where one line per state change is what an operator wants.
 */
let defaultLevel = 'warn';
let destination: DestinationStream | undefined;

/** The level of loggers made from here on, unless LANEWAKE_LOG_LEVEL or the caller names one. */
export function setDefaultLogLevel(level: string): void {
  defaultLevel = level;
}

/**
 * Where loggers made from here on write (default: stderr, fd 2). A test
 * runner that shows a failing test's output passes a stream of its own.
 */
export function setLogDestination(stream: DestinationStream | undefined): void {
  destination = stream;
}

/** pino JSON; level from the argument, else LANEWAKE_LOG_LEVEL, else the default (warn). Never log payloads. */
export function createLogger(name: string, level?: string): Logger {
  const resolved = level ?? process.env.LANEWAKE_LOG_LEVEL ?? defaultLevel;
  return pino({ name, level: resolved, base: { pid: process.pid } }, destination ?? pino.destination(2));
}
