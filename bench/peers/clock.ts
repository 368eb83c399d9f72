/**
 * The latency clock of the side-by-side benchmark. `process.hrtime.bigint()`
 * reads CLOCK_MONOTONIC on Linux, one clock for every process of the
 * machine, so a stamp taken by a producer process and one taken by a worker
 * process subtract. (`performance.timeOrigin + performance.now()` does not:
 * each process has its own origin, taken from the wall clock at its start.)
 */

/** CLOCK_MONOTONIC now, in whole µs. */
export function monotonicUs(): number {
  return Number(process.hrtime.bigint() / 1000n);
}

/** Milliseconds from an enqueue stamp (BenchJob.enqueuedAtUs) to now. */
export function msSince(stampUs: number): number {
  return (monotonicUs() - stampUs) / 1000;
}
