import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { expect, test } from 'vitest';
import { stringify } from 'yaml';
import { LanewakeMetrics } from '../src/supervisor/metrics.js';
import { needPromtool, promtool } from './support/promtool.js';

// docs/grafana-dashboard.json: importable as it is, on a data source chosen through its
// DS_PROMETHEUS variable, and querying only metrics a worker exports, in valid PromQL.

interface Target {
  expr: string;
  datasource?: { type?: string; uid?: string };
}
interface Panel {
  type: string;
  title: string;
  datasource?: { type?: string; uid?: string };
  targets?: Target[];
}
interface Dashboard {
  title: string;
  uid: string;
  templating: { list: { name: string; type: string; query: unknown; datasource?: unknown }[] };
  panels: Panel[];
}

const dashboard = JSON.parse(
  readFileSync(new URL('../docs/grafana-dashboard.json', import.meta.url), 'utf8'),
) as Dashboard;
const queryPanels = dashboard.panels.filter((p) => p.type !== 'row');
const exprs = queryPanels.flatMap((p) => (p.targets ?? []).map((t) => ({ panel: p.title, expr: t.expr })));
const DS = { type: 'prometheus', uid: '${DS_PROMETHEUS}' };

test('the dashboard picks its Prometheus through the DS_PROMETHEUS variable, in every panel and query', () => {
  expect(dashboard.uid).toMatch(/^[a-z0-9-]{1,40}$/);
  const variable = dashboard.templating.list.find((v) => v.name === 'DS_PROMETHEUS');
  expect(variable).toMatchObject({ type: 'datasource', query: 'prometheus' });
  for (const v of dashboard.templating.list.filter((x) => x.type === 'query')) expect(v.datasource, v.name).toEqual(DS);
  expect(queryPanels.length).toBeGreaterThan(10);
  for (const p of queryPanels) {
    expect(p.datasource, p.title).toEqual(DS);
    expect(p.targets?.length, p.title).toBeGreaterThan(0);
    for (const t of p.targets ?? []) expect(t.datasource, p.title).toEqual(DS);
  }
});

test('every metric the dashboard queries is one a worker exports, and it shows the ones that matter', () => {
  const exported = new Set(new LanewakeMetrics().registry.getMetricsAsArray().map((m) => m.name));
  const used = new Set(
    exprs.flatMap((e) => [...e.expr.matchAll(/\b((?:lanewake|process|nodejs)_[a-z0-9_]+)/g)].map((m) => m[1] ?? '')),
  );
  const base = (name: string): string => (exported.has(name) ? name : name.replace(/_(bucket|sum|count)$/, ''));
  expect([...used].filter((n) => !exported.has(base(n)))).toEqual([]);
  for (const needed of [
    'lanewake_items_completed_total',
    'lanewake_enqueue_to_start_seconds_bucket',
    'lanewake_queue_lag_seconds_bucket',
    'lanewake_handler_duration_seconds_bucket',
    'lanewake_items',
    'lanewake_queue_paused',
    'lanewake_in_flight',
    'process_cpu_seconds_total',
    'process_resident_memory_bytes',
    'nodejs_eventloop_lag_p99_seconds',
  ]) {
    expect(used.has(needed), needed).toBe(true);
  }
  // Quantiles come from the histograms' buckets.
  expect(exprs.filter((e) => e.expr.includes('histogram_quantile(')).length).toBeGreaterThanOrEqual(9);
});

test('every query is valid PromQL (promtool check rules, Grafana variables filled in)', (ctx) => {
  needPromtool(ctx);
  const filled = (expr: string): string => expr.replaceAll('$__rate_interval', '5m').replace(/\$(queue|job)\b/g, '.*');
  const rules = {
    groups: [
      { name: 'dashboard', rules: exprs.map((e, i) => ({ record: `dashboard:query_${i}`, expr: filled(e.expr) })) },
    ],
  };
  const dir = mkdtempSync(join(tmpdir(), 'lw-dashboard-'));
  try {
    const file = join(dir, 'rules.yml');
    writeFileSync(file, stringify(rules));
    const r = promtool(['check', 'rules', file]);
    expect(r.status, r.output).toBe(0);
    expect(r.output).toContain(`SUCCESS: ${exprs.length} rules found`);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
