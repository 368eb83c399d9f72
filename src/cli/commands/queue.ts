import type { Command } from 'commander';
import { globalOptions, requireSeenQueue, withLedger, withWake, type CliContext } from '../context.js';
import { withFieldNames } from '../errors.js';
import { queueSettingsSchema, validate } from '../../ledger/validation.js';
import { Producer } from '../../producer/producer.js';
import { println, printJson } from '../io.js';
import {
  SETTINGS_FIELDS,
  SETTINGS_HELP,
  settingsOf,
  settingsOptions,
  settingsText,
  type SettingsFlags,
} from './queue-settings.js';

const DRAIN_HELP = `
A drain-only queue takes in nothing new: every enqueue to it is refused (QueueDrainingError,
naming the queue and its state), from every producer within a second. Its workers go on and
finish every item it holds, pending, delayed, retrying or running. Once it holds none,
\`lanewake queue delete\` removes it. --undo makes it take items again.`;

const DELETE_HELP = `
Deletes a drain-only queue that holds no unfinished item: its items (all ended) with their
history, its lanes, keys, limits, owner and consumer rows, its settings, and with --redis-url
its Redis streams. Refused, nothing deleted (exit 1), when the queue is not drain-only, became so
less than 5 seconds ago (producers may not all know yet), or still holds unfinished items.
Workers serving it by a pattern let it go at their next reconcile.`;

const LIST_HELP = `
Every queue the ledger holds (a queue gets its row at its first enqueue, or when a setting is
written), with its flags, the settings set on it and its incarnation (when its row was made: a queue
deleted and made again is a new incarnation). Workers given a pattern (--queues 'tenant-*') serve the
ones it matches.`;

/** `lanewake queue list|create|drain|delete`. */
export function queueCommands(program: Command, { io }: CliContext): void {
  const queue = program.command('queue').description('list, create, update, drain and delete queues');

  queue
    .command('list')
    .description('list the queues the ledger holds, with their flags')
    .addHelpText('after', LIST_HELP)
    .action(async (_opts: unknown, cmd: Command) => {
      const g = globalOptions(cmd);
      const rows = await withLedger(g, (ledger) => ledger.queueRows());
      if (g.json) return printJson(io, rows);
      for (const r of rows) {
        const flags = [r.paused && 'paused', r.staleOnly && 'stale-only', r.drainOnly && 'drain-only'].filter(Boolean);
        const settings = settingsText(r);
        println(io, [r.queue, flags.join(' '), settings].filter((x) => x !== '').join('  '));
      }
    });

  settingsOptions(
    queue
      .command('create')
      .description('define a queue, so workers whose pattern matches it serve it before its first item')
      .argument('<queue>', 'queue name'),
  )
    .addHelpText('after', SETTINGS_HELP)
    .action(async (name: string, opts: SettingsFlags, cmd: Command) => {
      const g = globalOptions(cmd);
      const settings = settingsOf(opts);
      const given = Object.keys(settings).length > 0;
      const created = await withLedger(g, (ledger) =>
        withFieldNames(SETTINGS_FIELDS, 'queue create', () => ledger.createQueue(name, given ? settings : undefined)),
      );
      if (g.json) return printJson(io, { queue: name, created, ...(given ? { settings } : {}) });
      println(io, `queue ${name}: ${created ? 'created' : 'already defined'}${given ? ' (settings written)' : ''}`);
    });

  settingsOptions(
    queue
      .command('update')
      .description("change a queue's settings; every worker serving it applies them within one reconcile interval")
      .argument('<queue>', 'queue name'),
  )
    .addHelpText('after', SETTINGS_HELP)
    .action(async (name: string, opts: SettingsFlags, cmd: Command) => {
      const g = globalOptions(cmd);
      const settings = settingsOf(opts);
      await withLedger(g, (ledger) =>
        withFieldNames(SETTINGS_FIELDS, 'queue update', async () => {
          // Bad input is named before the queue is looked up.
          validate(queueSettingsSchema, settings, 'queue update', 'settings');
          await requireSeenQueue(ledger, name, '<queue>', false);
          await ledger.updateQueue(name, settings);
          // Paused or resumed: told on the control stream too, as `lanewake pause` does, so workers hear it now.
          const paused = settings.paused;
          if (paused !== undefined)
            await withWake(g, io, paused ? 'the pause' : 'the resume', (wake) => {
              const producer = new Producer({ ledger, wake });
              return paused ? producer.pause(name) : producer.resume(name);
            });
        }),
      );
      if (g.json) return printJson(io, { queue: name, settings });
      println(
        io,
        `queue ${name}: updated (${JSON.stringify(settings)}); workers apply it within one reconcile interval`,
      );
    });

  queue
    .command('drain')
    .description('make a queue drain-only: enqueues refused, what it holds finishes')
    .argument('<queue>', 'queue name')
    .option('--undo', 'take items again')
    .addHelpText('after', DRAIN_HELP)
    .action(async (name: string, opts: { undo?: boolean }, cmd: Command) => {
      const g = globalOptions(cmd);
      const on = opts.undo !== true;
      await withLedger(g, (ledger) =>
        withFieldNames({ queue: '<queue>' }, 'queue drain', async () => {
          await requireSeenQueue(ledger, name, '<queue>', false);
          await ledger.setDrainOnly(name, on);
        }),
      );
      if (g.json) return printJson(io, { queue: name, drainOnly: on });
      println(
        io,
        `queue ${name}: ${on ? 'drain-only (enqueues refused; what it holds finishes)' : 'takes items again'}`,
      );
    });

  queue
    .command('delete')
    .description('delete an empty drain-only queue with its rows, keys and streams')
    .argument('<queue>', 'queue name')
    .addHelpText('after', DELETE_HELP)
    .action(async (name: string, _opts: unknown, cmd: Command) => {
      const g = globalOptions(cmd);
      const { items, keys } = await withLedger(g, (ledger) =>
        withFieldNames({ queue: '<queue>' }, 'queue delete', async () => {
          const { items } = await ledger.deleteQueue(name);
          const keys = await withWake(g, io, 'the delete of its Redis keys', async (wake) =>
            wake ? wake.dropQueueKeys(name) : 0,
          );
          return { items, keys };
        }),
      );
      if (g.json) return printJson(io, { queue: name, deleted: true, items, redisKeys: keys });
      println(io, `queue ${name}: deleted (${items} ended item(s), ${keys} Redis key(s))`);
    });
}
