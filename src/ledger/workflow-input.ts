import { createHash } from 'node:crypto';
import { ValidationError, type FieldIssue } from '../errors.js';
import type { EnqueueInput } from './inputs.js';
import { prepareItems, type EnqueueTarget } from './enqueue-items.js';
import { requestDigest } from './request-digest.js';
import type { NewItem } from './sql/enqueue/new-item.js';
import { FAILURE_POLICIES, MAX_WORKFLOW_JOBS, type FailurePolicy, type WorkflowInput } from './workflow-types.js';

/** A workflow checked and ready to write: its jobs in definition order, each with the indexes of its parents. */
export interface PreparedWorkflow {
  key: string | null;
  name: string;
  onFailure: FailurePolicy;
  names: string[];
  items: NewItem[];
  parents: number[][];
  policies: FailurePolicy[];
  /** Hex: what the key promises (the same definition). */
  digest: string;
}

const JOB_NAME = /^[A-Za-z0-9_.:-]{1,128}$/;
/** Fields of an item a workflow's job may not carry (lanes and keys inside a workflow are refused for now). */
const REFUSED = ['lane', 'concurrencyKey', 'idempotencyKey'] as const;

/**
 * Checks a workflow definition, all issues at once, each naming its field (`jobs.b.after[0]`, `jobs.c.payload`),
 * and encodes its jobs. Throws ValidationError; nothing is written before this passes.
 */
export function prepareWorkflow(
  target: Pick<EnqueueTarget, 'itemFields' | 'payloadMaxBytes'>,
  input: WorkflowInput,
): PreparedWorkflow {
  const issues: FieldIssue[] = [];
  const fail = (field: string, message: string): void => void issues.push({ field, message });
  if (typeof input !== 'object' || input === null)
    throw new ValidationError([{ field: '(input)', message: 'must be an object' }], 'workflow');
  const { key, name, queue, onFailure } = input;
  if (key !== undefined && (typeof key !== 'string' || key.length < 1 || key.length > 255))
    fail('key', 'must be a string of 1 to 255 characters');
  if (name !== undefined && (typeof name !== 'string' || name.length < 1 || name.length > 128))
    fail('name', 'must be a string of 1 to 128 characters');
  if (onFailure !== undefined && !FAILURE_POLICIES.includes(onFailure)) fail('onFailure', "must be 'cancel' or 'run'");
  const jobs = input.jobs;
  if (typeof jobs !== 'object' || jobs === null || Array.isArray(jobs))
    throw new ValidationError([...issues, { field: 'jobs', message: 'must be an object of jobs by name' }], 'workflow');
  const names = Object.keys(jobs);
  if (names.length === 0) fail('jobs', 'must have at least one job');
  if (names.length > MAX_WORKFLOW_JOBS) fail('jobs', `must have at most ${MAX_WORKFLOW_JOBS} jobs`);
  if (issues.length > 0) throw new ValidationError(issues, 'workflow');

  const index = new Map(names.map((n, i) => [n, i]));
  const parents: number[][] = [];
  const policies: FailurePolicy[] = [];
  const itemInputs: EnqueueInput[] = [];
  // Jobs that are not objects: named once, not again for each of their item fields.
  const shapeless = new Set<string>();
  names.forEach((n) => {
    const at = `jobs.${n}`;
    if (!JOB_NAME.test(n)) fail(at, 'a name is 1 to 128 characters of letters, digits, _ - . :');
    const job = jobs[n] as unknown as Record<string, unknown> | undefined;
    if (typeof job !== 'object' || job === null) {
      fail(at, 'must be an object');
      shapeless.add(at);
      parents.push([]);
      policies.push('cancel');
      itemInputs.push({ queue: '', type: '', payload: null }); // never checked: keeps the indexes
      return;
    }
    for (const f of REFUSED) if (job[f] !== undefined) fail(`${at}.${f}`, 'is not supported inside a workflow');
    const policy = job.onFailure ?? onFailure ?? 'cancel';
    if (!FAILURE_POLICIES.includes(policy as FailurePolicy)) fail(`${at}.onFailure`, "must be 'cancel' or 'run'");
    policies.push(policy as FailurePolicy);
    const after = job.after ?? [];
    const mine: number[] = [];
    if (!Array.isArray(after)) fail(`${at}.after`, 'must be an array of job names');
    else
      after.forEach((p: unknown, k) => {
        const i = typeof p === 'string' ? index.get(p) : undefined;
        if (i === undefined) fail(`${at}.after[${k}]`, `names no job of this workflow (${JSON.stringify(p)})`);
        else if (p === n) fail(`${at}.after[${k}]`, 'a job cannot run after itself');
        else if (!mine.includes(i)) mine.push(i);
      });
    parents.push(mine);
    const { after: _after, onFailure: _policy, ...fields } = job;
    itemInputs.push({ ...fields, queue: (fields.queue as string | undefined) ?? queue } as EnqueueInput);
  });
  if (issues.length === 0) {
    const cycle = findCycle(parents);
    if (cycle !== undefined)
      fail(`jobs.${names[cycle[0]!]}.after`, `forms a cycle (${cycle.map((i) => names[i]).join(' -> ')})`);
  }
  let items: NewItem[] = [];
  try {
    const shaped = names.flatMap((n, i) => (shapeless.has(`jobs.${n}`) ? [] : [i]));
    items = prepareItems(
      target,
      shaped.map((i) => itemInputs[i]!),
      '',
      (k) => `jobs.${names[shaped[k]!]}`,
    );
  } catch (error) {
    if (!(error instanceof ValidationError)) throw error;
    issues.push(...error.issues);
  }
  if (issues.length > 0) throw new ValidationError(issues, 'workflow');
  items.forEach((item, i) => {
    if (parents[i]!.length > 0) item.waiting = true;
  });
  const policy = onFailure ?? 'cancel';
  return {
    key: key ?? null,
    name: name ?? 'workflow',
    onFailure: policy,
    names,
    items,
    parents,
    policies,
    digest: definitionDigest(names, items, parents, policies),
  };
}

/** A cycle of the graph (job indexes, first repeated last), if it has one: Kahn's order, then a walk among the rest. */
function findCycle(parents: readonly number[][]): number[] | undefined {
  const indegree = parents.map((p) => p.length);
  const children: number[][] = parents.map(() => []);
  parents.forEach((ps, child) => ps.forEach((p) => children[p]!.push(child)));
  const ready = indegree.flatMap((d, i) => (d === 0 ? [i] : []));
  let seen = 0;
  while (ready.length > 0) {
    const i = ready.pop()!;
    seen++;
    for (const c of children[i]!) if (--indegree[c]! === 0) ready.push(c);
  }
  if (seen === parents.length) return undefined;
  // Every job left has a parent left: walk parents until one repeats.
  let at = indegree.findIndex((d) => d > 0);
  const path: number[] = [];
  const onPath = new Map<number, number>();
  while (!onPath.has(at)) {
    onPath.set(at, path.length);
    path.push(at);
    at = parents[at]!.find((p) => indegree[p]! > 0)!;
  }
  return [...path.slice(onPath.get(at)), at].reverse();
}

/** SHA-256 (16 bytes, hex) of the definition: each job's name, request digest, parents and policy. */
function definitionDigest(
  names: readonly string[],
  items: readonly NewItem[],
  parents: readonly number[][],
  policies: readonly FailurePolicy[],
): string {
  const h = createHash('sha256');
  // By name: the same jobs written in another order are the same definition.
  const byName = names.map((n, i) => [n, i] as const).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
  byName.forEach(([n, i]) => {
    const deps = parents[i]!.map((p) => names[p]).sort();
    h.update(JSON.stringify([n, requestDigest({ ...items[i]!, lane: null }), deps, policies[i]]));
  });
  return h.digest('hex').slice(0, 32);
}
