import { spawn, type ChildProcessWithoutNullStreams } from 'node:child_process';
import { expect, test } from 'vitest';
import { freshQueue } from './support/items.js';
import { waitFor } from './support/ledger.js';
import { testScope } from './support/scope.js';
import { redisUrl } from './support/services.js';

const scope = testScope();
const TOKEN = 'cli-token-0123456789abcdef';

interface Child {
  proc: ChildProcessWithoutNullStreams;
  stdout: () => string;
  stderr: () => string;
  exit: Promise<number | null>;
}

/** `lanewake dashboard …` as a process, without the LANEWAKE_* variables of this one. */
function dashboard(args: string[], env: Record<string, string> = {}): Child {
  const inherited = { ...process.env };
  for (const name of Object.keys(inherited))
    if (name.startsWith('LANEWAKE_') && !name.startsWith('LANEWAKE_TEST_')) delete inherited[name];
  const proc = spawn(process.execPath, ['--import', 'tsx', 'src/cli/main.ts', 'dashboard', ...args], {
    env: { ...inherited, ...env },
  });
  let stdout = '';
  let stderr = '';
  proc.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
  proc.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
  const exit = new Promise<number | null>((resolve) => proc.on('exit', (code) => resolve(code)));
  scope.cleanup(async () => {
    if (proc.exitCode === null) proc.kill('SIGKILL');
    await exit;
  });
  return { proc, stdout: () => stdout, stderr: () => stderr, exit };
}

test(
  'lanewake dashboard prints its URL, takes its token from ' +
    'LANEWAKE_ADMIN_TOKEN, acts, logs the action, and stops on SIGTERM',
  async () => {
    const { ledger, url } = await scope.ledger();
    const tw = scope.wake();
    const queue = freshQueue('dcli');
    await ledger.enqueue({ queue, type: 't', payload: {} });
    const child = dashboard(
      ['--port', '0', '--database-url', url, '--redis-url', redisUrl(), '--redis-key-prefix', tw.keyPrefix],
      { LANEWAKE_ADMIN_TOKEN: TOKEN },
    );
    const base = await waitFor(
      () => /^(http:\/\/127\.0\.0\.1:\d+)$/m.exec(child.stdout())?.[1],
      30_000,
      'the printed URL',
    );
    expect(await (await fetch(`${base}/api/session`)).json()).toMatchObject({ canAct: true, showPayloads: false });
    const before = await tw.wake.control.latestId(tw.wake.redis, queue);
    const res = await fetch(`${base}/api/queues/${queue}/pause`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-lanewake-admin-token': TOKEN, 'x-lanewake-actor': 'grace' },
      body: '{}',
    });
    expect(res.status).toBe(200);
    expect(await ledger.pausedQueues([queue])).toEqual(new Set([queue]));
    expect(await tw.wake.control.latestId(tw.wake.redis, queue)).not.toBe(before);
    await waitFor(() => child.stderr().includes('"admin action"') || undefined, 10_000, 'the audit line');
    const audit = child
      .stderr()
      .split('\n')
      .filter((l) => l.includes('"admin action"'))
      .map((l) => JSON.parse(l) as Record<string, unknown>);
    expect(audit).toEqual([expect.objectContaining({ actor: 'grace', action: 'pause', queue, count: 1 })]);
    child.proc.kill('SIGTERM');
    expect(await child.exit).toBe(0);
  },
);

test('read-only without a token; SIGINT stops it', async () => {
  const { url } = await scope.ledger();
  const child = dashboard(['--port', '0', '--database-url', url]);
  const base = await waitFor(
    () => /^(http:\/\/127\.0\.0\.1:\d+)$/m.exec(child.stdout())?.[1],
    30_000,
    'the printed URL',
  );
  expect(await (await fetch(`${base}/api/session`)).json()).toMatchObject({ canAct: false });
  const res = await fetch(`${base}/api/queues/q/pause`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: '{}',
  });
  expect(res.status).toBe(403);
  child.proc.kill('SIGINT');
  expect(await child.exit).toBe(0);
});

test('a short token is refused before anything is served', async () => {
  const { url } = await scope.ledger();
  const child = dashboard(['--port', '0', '--database-url', url, '--admin-token', 'short']);
  expect(await child.exit).toBe(2);
  expect(child.stderr()).toContain('--admin-token');
  expect(child.stdout()).toBe('');
});
