import type { Command } from 'commander';
import type { WorkflowView } from '../../ledger/workflow-types.js';
import { globalOptions, withLedger, type CliContext } from '../context.js';
import { CliError, withFieldNames } from '../errors.js';
import { formatTime, renderTable } from '../format.js';
import { println, printJson, type CliIo } from '../io.js';
import { ID_HELP } from '../parse.js';

export function workflowCommand(program: Command, { io }: CliContext): void {
  program
    .command('workflow')
    .description("show a workflow's graph: each job, what it runs after, and its state")
    .argument('<id>', 'workflow id')
    .allowUnknownOption() // an id may begin with '-': take it as the id, not as an unknown option
    .option('--cancel', 'cancel the workflow first: every job not started (its dependents too) is cancelled', false)
    .addHelpText(
      'after',
      `
A job's state is its item's, or waiting: pending, with dependencies still to settle (claims do not
see it). Jobs are listed in dependency order. Exits 1 when there is no such workflow.
${ID_HELP}`,
    )
    .action(async (id: string, opts: { cancel: boolean }, cmd: Command) => {
      const g = globalOptions(cmd);
      const { view, cancelled } = await withLedger(g, (ledger) =>
        withFieldNames({ id: '<id>' }, 'workflow', async () => {
          const n = opts.cancel ? await ledger.workflows.cancel(id) : undefined;
          return { view: await ledger.workflows.get(id), cancelled: n };
        }),
      );
      if (!view) throw new CliError(`no workflow ${id}`);
      if (g.json) return printJson(io, cancelled === undefined ? view : { ...view, cancelledJobs: cancelled });
      if (cancelled !== undefined) println(io, `cancelled ${cancelled} job(s) not started`);
      printWorkflow(io, view);
    });
}

function printWorkflow(io: CliIo, w: WorkflowView): void {
  println(io, `workflow ${w.id} ${JSON.stringify(w.name)}: ${w.state}, on failure ${w.onFailure}`);
  if (w.key !== null) println(io, `key:        ${w.key}`);
  if (w.parentItem !== null) println(io, `added by:   item ${w.parentItem}`);
  println(io, `created:    ${formatTime(w.createdAt)}`);
  const counts = new Map<string, number>();
  for (const j of w.jobs) counts.set(j.state, (counts.get(j.state) ?? 0) + 1);
  println(io, `jobs:       ${[...counts].map(([s, n]) => `${n} ${s}`).join(', ')}`);
  const rows = inDependencyOrder(w.jobs).map((j) => [
    j.name,
    j.state,
    j.type,
    j.queue,
    j.after.length === 0
      ? '-'
      : j.after.length > 5
        ? `${j.after.slice(0, 5).join(', ')} +${j.after.length - 5}`
        : j.after.join(', '),
    j.id,
  ]);
  println(io, renderTable(['JOB', 'STATE', 'TYPE', 'QUEUE', 'AFTER', 'ID'], rows));
}

/** The jobs by depth (a job after all it depends on), then by name. */
function inDependencyOrder(jobs: WorkflowView['jobs']): WorkflowView['jobs'] {
  const byName = new Map(jobs.map((j) => [j.name, j]));
  const depth = new Map<string, number>();
  const depthOf = (name: string, seen: Set<string>): number => {
    const known = depth.get(name);
    if (known !== undefined) return known;
    if (seen.has(name)) return 0;
    seen.add(name);
    const parents = byName.get(name)?.after ?? [];
    const d = parents.length === 0 ? 0 : 1 + Math.max(...parents.map((p) => depthOf(p, seen)));
    depth.set(name, d);
    return d;
  };
  return [...jobs].sort(
    (a, b) => depthOf(a.name, new Set()) - depthOf(b.name, new Set()) || (a.name < b.name ? -1 : 1),
  );
}
