import type { ComponentChildren } from 'preact';
import { absolute, relative } from '../format.js';
import type { ItemState } from '../types.js';

export function StateBadge({ state }: { state: ItemState | string }) {
  return <span class={`badge state-${state}`}>{state}</span>;
}

export function Time({ iso }: { iso: string | null | undefined }) {
  if (iso === null || iso === undefined) return <span class="muted">–</span>;
  return (
    <time dateTime={iso} title={absolute(iso)}>
      {relative(iso)}
    </time>
  );
}

export function Loading() {
  return <p class="muted loading">Loading…</p>;
}

export function ErrorBox({ error }: { error: Error | undefined }) {
  if (error === undefined) return null;
  return (
    <p class="error-box" role="alert">
      {error.message}
    </p>
  );
}

export function Empty({ children }: { children: ComponentChildren }) {
  return <p class="empty">{children}</p>;
}

/** A page's title row: the heading, a subtitle and the page's buttons on the right. */
export function PageHead({
  title,
  sub,
  children,
}: {
  title: ComponentChildren;
  sub?: ComponentChildren;
  children?: ComponentChildren;
}) {
  return (
    <div class="page-head">
      <div>
        <h1>{title}</h1>
        {sub !== undefined && <div class="sub">{sub}</div>}
      </div>
      {children !== undefined && <div class="actions">{children}</div>}
    </div>
  );
}

/** Long text cut to its first line and `max` characters, the whole of it in the title. */
export function Clip({ text, max = 120 }: { text: string | null | undefined; max?: number }) {
  if (text === null || text === undefined || text === '') return <span class="muted">–</span>;
  const line = text.split('\n', 1)[0] ?? '';
  if (line === text && text.length <= max) return <span>{text}</span>;
  return <span title={text}>{line.length > max ? `${line.slice(0, max)}…` : `${line} …`}</span>;
}
