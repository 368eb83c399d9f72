import { count, duration } from '../format.js';
import type { SeriesPoint } from '../types.js';

// Last-hour charts drawn as inline SVG from a queue's `series` (1-minute buckets).

const W = 150;
const H = 32;

function at(p: SeriesPoint): string {
  return new Date(p.at).toISOString().slice(11, 16);
}

/** Completed (and failed, stacked on top in red) per bucket. */
export function ThroughputSpark({ points, bucketMs }: { points: SeriesPoint[]; bucketMs: number }) {
  const max = Math.max(1, ...points.map((p) => p.completed + p.failed));
  const n = Math.max(points.length, 1);
  const bw = W / n;
  const done = points.reduce((s, p) => s + p.completed, 0);
  const failed = points.reduce((s, p) => s + p.failed, 0);
  const per = bucketMs >= 60_000 ? `/${Math.round(bucketMs / 60_000)} min` : `/${duration(bucketMs)}`;
  return (
    <div class="spark">
      <svg
        class="spark-svg"
        viewBox={`0 0 ${W} ${H}`}
        width={W}
        height={H}
        preserveAspectRatio="none"
        role="img"
        aria-label="throughput, last hour"
      >
        <title>{`last hour: ${count(done)} completed, ${count(failed)} failed (peak ${count(max)}${per})`}</title>
        <line class="spark-base" x1="0" y1={H - 0.5} x2={W} y2={H - 0.5} />
        {points.map((p, i) => {
          const hc = (p.completed / max) * (H - 2);
          const hf = (p.failed / max) * (H - 2);
          const x = i * bw + 0.15 * bw;
          const w = Math.max(0.7 * bw, 0.8);
          return (
            <g key={p.at}>
              <title>{`${at(p)}: ${p.completed} completed, ${p.failed} failed`}</title>
              {hc > 0 && <rect class="bar-ok" x={x} y={H - hc} width={w} height={hc} />}
              {hf > 0 && <rect class="bar-fail" x={x} y={H - hc - hf} width={w} height={hf} />}
            </g>
          );
        })}
      </svg>
      <span class="spark-label">
        <span>{count(done)} done</span>
        {failed > 0 && <span class="fail-text">{count(failed)} failed</span>}
      </span>
    </div>
  );
}

function path(values: (number | null)[], max: number): string {
  const n = values.length;
  const step = n > 1 ? W / (n - 1) : W;
  let d = '';
  let pen = false;
  values.forEach((v, i) => {
    if (v === null) {
      pen = false;
      return;
    }
    const x = (i * step).toFixed(1);
    const y = (H - 1 - (v / max) * (H - 3)).toFixed(1);
    d += `${pen ? 'L' : 'M'}${x} ${y} `;
    pen = true;
  });
  return d.trim();
}

/** Enqueue→start latency per bucket: p50 solid, p99 faint. */
export function LatencySpark({ points }: { points: SeriesPoint[] }) {
  const p50 = points.map((p) => p.startP50Ms);
  const p99 = points.map((p) => p.startP99Ms);
  const known = [...p50, ...p99].filter((v): v is number => v !== null);
  const lastP50 = [...p50].reverse().find((v): v is number => v !== null);
  const lastP99 = [...p99].reverse().find((v): v is number => v !== null);
  const max = Math.max(1, ...known);
  return (
    <div class="spark">
      <svg
        class="spark-svg"
        viewBox={`0 0 ${W} ${H}`}
        width={W}
        height={H}
        preserveAspectRatio="none"
        role="img"
        aria-label="enqueue to start latency, last hour"
      >
        <title>{`enqueue→start, last hour: peak ${duration(max)}`}</title>
        <line class="spark-base" x1="0" y1={H - 0.5} x2={W} y2={H - 0.5} />
        {known.length > 0 && <path class="line-p99" d={path(p99, max)} />}
        {known.length > 0 && <path class="line-p50" d={path(p50, max)} />}
      </svg>
      <span class="spark-label" title="the last minute with starts">
        {lastP50 === undefined ? <span class="muted">no starts</span> : <span>p50 {duration(lastP50)}</span>}
        {lastP99 !== undefined && <span class="muted">p99 {duration(lastP99)}</span>}
      </span>
    </div>
  );
}
