import { resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import { ValidationError } from '../errors.js';
import type { HandlerEntry } from '../consumer/types.js';

/** Handlers by queue, then by type. */
export type HandlersByQueue = Record<string, Record<string, HandlerEntry<never>>>;

/**
 * Loads the worker's handler module: an ES module whose `handlers` export
 * (or default export) maps queue → type → handler.
 */
export async function loadHandlersModule(path: string, cwd = process.cwd()): Promise<HandlersByQueue> {
  let mod: Record<string, unknown>;
  try {
    mod = (await import(pathToFileURL(resolve(cwd, path)).href)) as Record<string, unknown>;
  } catch (error) {
    throw new ValidationError(
      [{ field: 'handlers', message: `cannot load ${path}: ${(error as Error).message}` }],
      'worker config',
    );
  }
  const table = (mod.handlers ?? mod.default) as unknown;
  if (typeof table !== 'object' || table === null) {
    throw new ValidationError(
      [
        {
          field: 'handlers',
          message: `${path} must export \`handlers\` (or a default export): { [queue]: { [type]: handler } }`,
        },
      ],
      'worker config',
    );
  }
  for (const [queue, types] of Object.entries(table)) {
    if (typeof types !== 'object' || types === null) {
      throw new ValidationError(
        [{ field: `handlers.${queue}`, message: 'must map types to handlers' }],
        'worker config',
      );
    }
    for (const [type, h] of Object.entries(types as Record<string, unknown>)) {
      const ok =
        typeof h === 'function' ||
        (typeof h === 'object' && h !== null && typeof (h as { handle?: unknown }).handle === 'function');
      if (!ok)
        throw new ValidationError(
          [{ field: `handlers.${queue}.${type}`, message: 'must be a function or { handle }' }],
          'worker config',
        );
    }
  }
  return table as HandlersByQueue;
}
