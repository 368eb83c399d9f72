// Handler module for worker-process tests: the queue name comes from the environment.
const queue = process.env.LW_TEST_QUEUE ?? 'worker-test';
const slowMs = Number(process.env.LW_TEST_SLOW_MS ?? '300');

export const handlers = {
  [queue]: {
    fast: async () => ({ ok: true }),
    slow: async () => {
      await new Promise((resolve) => setTimeout(resolve, slowMs));
      return { ok: 'slow' };
    },
  },
};
