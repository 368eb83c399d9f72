import { pino, type Logger } from 'pino';

export interface CapturedLine {
  level: number;
  msg: string;
  [field: string]: unknown;
}

export interface CapturedLog {
  logger: Logger;
  lines: CapturedLine[];
  /** Lines at `level` (pino's numbers: 30 info, 40 warn, 50 error) whose message matches. */
  at: (level: number, msg?: RegExp) => CapturedLine[];
}

/** A pino logger writing into an array, for tests that assert what an operator would read. */
export function captureLog(level = 'info'): CapturedLog {
  const lines: CapturedLine[] = [];
  const logger = pino({ level }, { write: (s: string) => void lines.push(JSON.parse(s) as CapturedLine) });
  return {
    logger,
    lines,
    at: (lvl, msg) => lines.filter((l) => l.level === lvl && (msg === undefined || msg.test(l.msg))),
  };
}
