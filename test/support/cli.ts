import { runCli, type CommandFactory } from '../../src/cli/program.js';

/** What one CLI run wrote and its exit code. */
export interface Run {
  code: number;
  out: string;
  err: string;
}

/** Runs the CLI in-process with captured output. */
export async function lanewake(args: readonly string[], commands?: readonly CommandFactory[]): Promise<Run> {
  let out = '';
  let err = '';
  const code = await runCli(
    args,
    { out: (s) => (out += s), err: (s) => (err += s), columns: 200 },
    commands ? { commands } : {},
  );
  return { code, out, err };
}
