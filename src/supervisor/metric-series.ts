import type { Registry } from 'prom-client';

/** What a counter, gauge or histogram of prom-client answers (its types list the registry's entries plainer). */
interface Series {
  get: () => Promise<{ values: { labels: Record<string, string | number | undefined> }[] }>;
  remove: (labels: Record<string, string | number>) => void;
}

/** Labels a series carries per bucket or quantile, not per series: left out when the series is named to remove it. */
const PER_SAMPLE = new Set(['le', 'quantile']);

/**
 * Removes every series of `registry` labelled `queue`, so that /metrics
 * carries a queue label only for queues the worker serves: a queue it let go
 * (deleted, or no longer matched) leaves no counters or histograms behind.
 * Gauges set per scrape from the consumers drop it by themselves.
 */
export async function forgetQueueSeries(registry: Registry, queue: string): Promise<void> {
  for (const metric of registry.getMetricsAsArray() as unknown as Series[]) {
    const { values } = await metric.get();
    const seen = new Set<string>();
    for (const v of values) {
      const labels = v.labels;
      if (labels.queue !== queue) continue;
      const series = Object.fromEntries(Object.entries(labels).filter(([k]) => !PER_SAMPLE.has(k)));
      const key = JSON.stringify(series);
      if (seen.has(key)) continue;
      seen.add(key);
      metric.remove(series as Record<string, string | number>);
    }
  }
}
