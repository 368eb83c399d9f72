import { describe, expectTypeOf, test } from 'vitest';
import { defineHandler, type Job } from '../src/index.js';

// Compile-time checks of `job.coalesced` (vitest --typecheck runs this file inside `npm test`): a
// definition with `coalesce` types it as always there, with `payloads` for `all` and `settled`.

describe('job.coalesced', () => {
  test('a coalescing definition: `coalesced` is always there; `payloads` too for all and settled', () => {
    defineHandler<{ n: number }>({
      coalesce: 'all',
      handle: async (job) => {
        expectTypeOf(job.coalesced).toEqualTypeOf<
          { ids: string[]; count: number; payloads?: { n: number }[] } & { payloads: { n: number }[] }
        >();
        expectTypeOf(job.coalesced.payloads).toEqualTypeOf<{ n: number }[]>();
        expectTypeOf(job.coalesced.count).toEqualTypeOf<number>();
      },
    });
    defineHandler({
      coalesce: 'settled',
      handle: async (job: Job<{ n: number }>) => void job,
    });
    defineHandler<{ n: number }>({
      coalesce: 'settled',
      handle: async (job) => {
        expectTypeOf(job.coalesced.payloads).toEqualTypeOf<{ n: number }[]>();
      },
    });
    defineHandler<{ n: number }>({
      coalesce: 'latest',
      handle: async (job) => {
        expectTypeOf(job.coalesced.ids).toEqualTypeOf<string[]>();
        expectTypeOf(job.coalesced.payloads).toEqualTypeOf<{ n: number }[] | undefined>();
      },
    });
  });

  test('a definition without coalesce: `coalesced` may be undefined', () => {
    defineHandler<{ n: number }>({
      handle: async (job) => {
        expectTypeOf(job.coalesced).toEqualTypeOf<
          { ids: string[]; count: number; payloads?: { n: number }[] } | undefined
        >();
        // @ts-expect-error possibly undefined without coalesce
        void job.coalesced.count;
      },
    });
  });
});
