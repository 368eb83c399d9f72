/** Where the CLI writes: the real process streams, or buffers in a test. */
export interface CliIo {
  /** Standard output: results (tables, ids, JSON). */
  out(text: string): void;
  /** Standard error: errors, warnings, notes. */
  err(text: string): void;
  /** Width for help text; default 100. */
  columns?: number;
}

export function processIo(): CliIo {
  return {
    out: (text) => process.stdout.write(text),
    err: (text) => process.stderr.write(text),
    columns: process.stdout.columns,
  };
}

export function println(io: CliIo, line = ''): void {
  io.out(`${line}\n`);
}

export function eprintln(io: CliIo, line = ''): void {
  io.err(`${line}\n`);
}

/** Machine output for --json: one JSON document. */
export function printJson(io: CliIo, value: unknown): void {
  io.out(`${JSON.stringify(value, null, 2)}\n`);
}
