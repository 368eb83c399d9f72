import type { Command } from 'commander';
import type { CliContext } from '../context.js';
import { DemoInterrupted, runDemo } from '../../demo/run-demo.js';
import { CliError, EXIT } from '../errors.js';
import { println, printJson } from '../io.js';
import { parseInteger } from '../parse.js';
import { renderTable } from '../format.js';

interface DemoFlags {
  items: number;
  lanes: number;
  replicas: number;
  keep: boolean;
  progress: boolean;
}

export function demoCommand(program: Command, { io }: CliContext): void {
  program
    .command('demo')
    .description(
      'run the whole system under faults against the local MariaDB and Redis, and check it kept its promises',
    )
    .option('--items <n>', 'items to enqueue', parseInteger, 20_000)
    .option('--lanes <n>', 'lanes they are spread over', parseInteger, 1_000)
    .option('--replicas <n>', 'worker replicas (child processes)', parseInteger, 3)
    .option('--keep', 'keep the demo database afterwards', false)
    .option('--no-progress', 'no live progress bar')
    .addHelpText(
      'after',
      `
Makes a fresh database on the server of --database-url, migrates it, starts the
worker replicas, enqueues a mixed workload (ordinary, flaky, permanently failing,
slower-than-deadline items; effects written through ctx.transaction), SIGKILLs one
replica midway and starts a new one, then prints a summary. Exits 1 if any lane
ran out of order, any effect happened twice, or a completed item has no effect.
Needs --redis-url (default redis://127.0.0.1:6379). SIGINT (Ctrl-C) or SIGTERM
stops the replicas, drops the database and the demo's Redis keys (unless --keep)
and exits 130; a second kills the replicas without their drain, a third exits
at once (the database stays).`,
    )
    .action(async (flags: DemoFlags, cmd: Command) => {
      const g = cmd.optsWithGlobals<{ databaseUrl: string; redisUrl?: string; json?: boolean }>();
      const server = new URL(g.databaseUrl);
      server.pathname = '';
      // The first SIGINT or SIGTERM ends the run cleanly (the replicas stopped, the database and keys dropped).
      // Ctrl-C under `npm run demo` may deliver a second at once (the terminal's, and npm's forwarded copy),
      // so a second only kills the replicas without their drain, and the clean-up goes on; a third exits now
      // (the demo's exit hook kills the replicas; the database stays).
      const interrupt = new AbortController();
      const hurry = new AbortController();
      let signals = 0;
      const onSignal = (signal: NodeJS.Signals): void => {
        signals++;
        if (signals === 1) interrupt.abort(signal);
        else if (signals === 2) hurry.abort(signal);
        else process.exit(EXIT.interrupted);
      };
      process.on('SIGINT', onSignal);
      process.on('SIGTERM', onSignal);
      const summary = await runDemo({
        serverUrl: server.toString().replace(/\/+$/, ''),
        redisUrl: g.redisUrl ?? 'redis://127.0.0.1:6379',
        items: flags.items,
        lanes: flags.lanes,
        replicas: flags.replicas,
        keep: flags.keep,
        progress: flags.progress && !g.json,
        out: (line) => (g.json ? undefined : println(io, line)),
        signal: interrupt.signal,
        killSignal: hurry.signal,
      })
        .catch((error: unknown) => {
          throw error instanceof DemoInterrupted ? new CliError(error.message, EXIT.interrupted) : error;
        })
        .finally(() => {
          process.off('SIGINT', onSignal);
          process.off('SIGTERM', onSignal);
        });
      if (g.json) printJson(io, summary);
      else {
        const rows: [string, string][] = [
          ['items', String(summary.items)],
          ['completed', String(summary.completed)],
          ['dead letters', String(summary.dead)],
          ['retries', String(summary.retries)],
          ['releases (deadline, no attempt spent)', String(summary.releases)],
          [`leases reclaimed after ${summary.killedReplica || 'the kill'}`, String(summary.leaseReclaims)],
          ['wall time', `${summary.seconds.toFixed(1)} s`],
          ['throughput', `${Math.round(summary.throughput)} items/s`],
          [
            'enqueue→start p50 / p99 (first attempts, incl. backlog wait)',
            `${summary.startP50Ms.toFixed(1)} / ${summary.startP99Ms.toFixed(1)} ms`,
          ],
          ['lane-order violations', String(summary.laneOrderViolations)],
          ['duplicate effects', String(summary.duplicateEffects)],
          ['completed items without their effect', String(summary.missingEffects)],
        ];
        println(io);
        println(io, renderTable(['', 'value'], rows, ['left', 'right']));
      }
      const broken = summary.laneOrderViolations + summary.duplicateEffects + summary.missingEffects;
      const lost = summary.items - summary.completed - summary.dead;
      if (broken > 0 || lost !== 0)
        throw new CliError(`the demo found ${broken} broken promise(s) and ${lost} unfinished item(s)`);
    });
}
