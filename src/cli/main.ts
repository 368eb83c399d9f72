#!/usr/bin/env node
import { processIo } from './io.js';
import { runCli } from './program.js';

const code = await runCli(process.argv, processIo(), { from: 'node' });
// Exit once both streams are flushed: a piped stdout must not lose its tail.
process.stdout.write('', () => process.stderr.write('', () => process.exit(code)));
