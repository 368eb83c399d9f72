import { z } from 'zod';
import { ValidationError } from '../errors.js';

export const MIB = 1024 * 1024;

export const ledgerConfigSchema = z
  .object({
    url: z
      .string()
      .refine((v) => {
        try {
          const u = new URL(v);
          return (u.protocol === 'mysql:' || u.protocol === 'tidb:') && u.pathname.length > 1;
        } catch {
          return false;
        }
      }, 'must be a mysql:// URL that names a database, e.g. mysql://root@127.0.0.1:3306/lanewake')
      .describe('mysql://user:pass@host:port/database (MariaDB 10.11, MySQL 8 or TiDB; tidb:// is accepted too).'),
    poolSize: z.number().int().min(1).max(512).default(10).describe("Connections in the ledger's pool."),
    tablePrefix: z
      .string()
      .regex(/^[a-z][a-z0-9_]{0,23}$/, 'must be 1-24 chars of [a-z0-9_], starting with a letter')
      .default('lw_')
      .describe(
        'Prefix of every ledger table (1-24 chars of [a-z0-9_], starting with a letter), so several ' +
          'ledgers can share one database.',
      ),
    payloadMaxBytes: z
      .number()
      .int()
      .min(1)
      .max(64 * MIB)
      .default(MIB)
      .describe('Largest payload (and checkpoint) an item may carry, in bytes of its UTF-8 JSON.'),
    resultMaxBytes: z
      .number()
      .int()
      .min(1)
      .max(64 * MIB)
      .default(MIB)
      .describe(
        'Largest handler result (or skip reason) an item may store, in bytes of its UTF-8 JSON; a ' +
          'larger result ends the item dead, class `result_too_large`.',
      ),
    tidbTxnMode: z
      .enum(['pessimistic', 'optimistic'])
      .default('pessimistic')
      .describe(
        "TiDB only (MariaDB and MySQL ignore it): the transaction mode of the ledger's sessions. " +
          "pessimistic (TiDB's default) gives the READ COMMITTED reads the ledger is built on; " +
          'optimistic takes no locks until COMMIT, where a write conflict (9007) loses the CAS or ' +
          'retries the transaction.',
      ),
    errorMaxChars: z
      .number()
      .int()
      .min(64)
      .max(60_000)
      .default(4000)
      .describe('Error texts are cut to this many characters in the item and its history.'),
  })
  .strict();

export type LedgerConfigInput = z.input<typeof ledgerConfigSchema>;
export type LedgerConfig = z.output<typeof ledgerConfigSchema>;

export function parseLedgerConfig(input: unknown): LedgerConfig {
  const parsed = ledgerConfigSchema.safeParse(input);
  if (!parsed.success) throw ValidationError.fromZod(parsed.error, 'ledger config');
  return parsed.data;
}
