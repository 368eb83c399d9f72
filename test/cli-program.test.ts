// The lanewake CLI without a ledger (an unreachable one, the key prefix's name, --help, further commands), and its
// entry point run as a process.
import { execFile } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { CORE_COMMANDS, type CommandFactory } from '../src/cli/program.js';
import { freshQueue } from './support/items.js';
import { createTestLedger, type TestLedger } from './support/ledger.js';
import { freePort } from './support/processes.js';
import { lanewake } from './support/cli.js';

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '..');

describe('lanewake CLI without a ledger', () => {
  it('an unreachable ledger exits 1 with the (redacted) URL', async () => {
    const r = await lanewake(['stats', '--database-url', `mysql://root:hunter2@127.0.0.1:${await freePort()}/x`]);
    expect(r.code).toBe(1);
    expect(r.err).toMatch(/^error: cannot reach the ledger at mysql:\/\/root:\*\*\*@127\.0\.0\.1:\d+\/x: /);
    expect(r.err).not.toContain('hunter2');
  });

  it('the Redis key prefix has one name: LANEWAKE_KEY_PREFIX is refused naming LANEWAKE_REDIS_KEY_PREFIX', async () => {
    process.env.LANEWAKE_KEY_PREFIX = 'old:';
    try {
      for (const args of [['stats'], ['enqueue', 'q', 't'], ['activate', '--queue', 'q', '--deployment', 'd']]) {
        const r = await lanewake([...args, '--database-url', `mysql://root@127.0.0.1:${await freePort()}/x`]);
        expect(r.code, `${args.join(' ')}: ${r.err}`).toBe(2);
        expect(r.err).toContain('LANEWAKE_KEY_PREFIX was renamed: set LANEWAKE_REDIS_KEY_PREFIX');
      }
    } finally {
      delete process.env.LANEWAKE_KEY_PREFIX;
    }
    const bad = await lanewake(['stats', '--redis-key-prefix', 'no spaces']);
    expect(bad.code).toBe(2);
    expect(bad.err).toContain("option '--redis-key-prefix' must be 1-64 chars");
  });

  it('every command describes itself in --help', async () => {
    const top = await lanewake(['--help']);
    expect(top.code).toBe(0);
    for (const name of ['migrate', 'enqueue', 'stats', 'inspect', 'dead', 'replay', 'cancel', 'activate'])
      expect(top.out).toMatch(new RegExp(`^  ${name} `, 'm'));
    expect(top.out).toContain('3  ownership lost');
    expect(await lanewake(['--version'])).toMatchObject({
      code: 0,
      out: `${(JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')) as { version: string }).version}\n`,
    });
    const described: Record<string, RegExp> = {
      migrate: /bring its schema\s+up to date/,
      enqueue: /add one work item/,
      stats: /count items by state/,
      inspect: /without its payload/,
      dead: /dead letters/,
      'dead list': /list dead items/,
      replay: /re-drive a dead or cancelled item/,
      cancel: /cancel an item/,
      activate: /Exit 3: --expect-epoch did not match/,
      worker: /refines the\s+file's queues by name/,
      pause: /every worker of the queue stops claiming/,
      resume: /Clears the flag `lanewake pause` set: the queue's workers claim again/,
      'queue update': /A worker whose own config sets slots or maxProcessing for the queue keeps its value/,
    };
    for (const [cmd, text] of Object.entries(described)) {
      const r = await lanewake([...cmd.split(' '), '--help']);
      expect(r.code, cmd).toBe(0);
      expect(r.out).toContain(`Usage: lanewake ${cmd} `);
      expect(r.out, cmd).toMatch(text);
    }
    // Each has its own text: resume's help does not describe pausing.
    const [pause, resume] = await Promise.all([lanewake(['pause', '--help']), lanewake(['resume', '--help'])]);
    expect(resume.out).not.toMatch(/stops claiming|pause a queue/);
    expect(pause.out).not.toMatch(/Clears the flag|resume a paused queue/);
    expect(top.out).toMatch(
      /^ {2}130 +the demo interrupted \(SIGINT or SIGTERM\); a worker's second SIGINT while draining$/m,
    );
    expect(top.out).toMatch(/^ {2}143 +a worker's second SIGTERM while draining$/m);
  });

  it('buildProgram takes further command factories', async () => {
    const hello: CommandFactory = (program, { io }) => {
      program
        .command('hello')
        .description('say hello')
        .action(() => io.out('hello\n'));
    };
    expect(await lanewake(['hello'], [...CORE_COMMANDS, hello])).toEqual({ code: 0, out: 'hello\n', err: '' });
    expect((await lanewake(['hello'])).code).toBe(2);
  });
});

describe('the lanewake entry point', () => {
  let t2: TestLedger;
  beforeEach(async () => {
    t2 = await createTestLedger();
  });
  afterEach(async () => {
    await t2.drop();
  });

  it('runs as a process: --help and stats --json exit 0', async () => {
    const queue = freshQueue('cli-proc');
    await t2.ledger.enqueue({ queue, type: 't', payload: {} });
    const env: NodeJS.ProcessEnv = { ...process.env, LANEWAKE_LOG_LEVEL: 'warn' };
    delete env.VITEST;
    delete env.VITEST_WORKER_ID;
    delete env.VITEST_POOL_ID;
    const run = promisify(execFile);
    const main = join('src', 'cli', 'main.ts');
    const [help, stats] = await Promise.all([
      run(process.execPath, ['--import', 'tsx', main, '--help'], { cwd: ROOT, env }),
      run(process.execPath, ['--import', 'tsx', main, 'stats', '--database-url', t2.url, '--json'], { cwd: ROOT, env }),
    ]);
    // execFile rejects on a non-zero exit, so reaching here means both exited 0.
    expect(help.stdout).toMatch(/^Usage: lanewake \[options\] \[command\]/);
    expect(JSON.parse(stats.stdout)).toEqual([
      expect.objectContaining({ queue, counts: expect.objectContaining({ pending: { count: 1, atLeast: false } }) }),
    ]);
  });
});
