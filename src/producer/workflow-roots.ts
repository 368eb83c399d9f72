import type { EnqueueInput } from '../ledger/inputs.js';
import type { EnqueueResult } from '../ledger/types.js';
import type { WorkflowInput, WorkflowResult } from '../ledger/workflow-types.js';

/**
 * A committed workflow's jobs without dependencies, as the enqueue announcement takes them: those are claimable at
 * once. The others are made claimable by their last dependency's end, whose consumer claims again at once
 * (docs/design/workflows.md, Wake-ups).
 */
export function workflowRoots(
  input: WorkflowInput,
  result: WorkflowResult,
): { inputs: EnqueueInput[]; results: EnqueueResult[] } {
  const inputs: EnqueueInput[] = [];
  const results: EnqueueResult[] = [];
  for (const [name, job] of Object.entries(input.jobs)) {
    const id = result.jobs[name];
    if (id === undefined || (job.after !== undefined && job.after.length > 0)) continue;
    inputs.push({
      queue: job.queue ?? input.queue ?? '',
      type: job.type,
      payload: null,
      queueClass: job.queueClass,
      runAt: job.runAt,
      delayMs: job.delayMs,
    });
    results.push({ id, duplicate: false, laneSeq: null });
  }
  return { inputs, results };
}
