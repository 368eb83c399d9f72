/**
 * Warnings the measured systems print, kept for the run's result
 * (RunResult.warnings) instead of being lost in the scroll or filtered out:
 * a peer's complaint about its own set-up belongs next to its number.
 *
 * One collector per process. Adapters report their libraries' own warning
 * channels here (graphile-worker's logger, pg-boss and BullMQ 'error'
 * events, lanewake's pino warn lines); `captureProcessWarnings` adds what
 * libraries print through `console.warn` (BullMQ's Redis checks) or
 * `process.emitWarning` (pg-boss).
 */

const counts = new Map<string, number>();
let capturing = false;

/** Counts `message` under `source`; returns the line as kept. */
function count(source: string, message: string): string {
  const text = `${source}: ${message.replace(/\s+/g, ' ').trim()}`;
  counts.set(text, (counts.get(text) ?? 0) + 1);
  return text;
}

/** Records a warning (repeats are counted, not kept) and prints it to stderr unless the library did. */
export function recordWarning(source: string, message: string, opts: { printed?: boolean } = {}): void {
  const line = count(source, message);
  if (!opts.printed) process.stderr.write(`[warning] ${line}\n`);
}

/** Every warning recorded in this process, "(×n)" when it came more than once. */
export function recordedWarnings(): string[] {
  return [...counts].map(([text, n]) => (n > 1 ? `${text} (×${n})` : text));
}

/** Records `console.warn` output and Node process warnings too (once per process). */
export function captureProcessWarnings(): void {
  if (capturing) return;
  capturing = true;
  const warn = console.warn.bind(console);
  console.warn = (...args: unknown[]): void => {
    count(
      'console.warn',
      args.map((a) => (a instanceof Error ? a.message : typeof a === 'string' ? a : JSON.stringify(a))).join(' '),
    );
    warn(...args);
  };
  // Node prints these itself; a listener only adds the record.
  process.on('warning', (w) => void count('process warning', `${w.name}: ${w.message}`));
}
