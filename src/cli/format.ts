/** Plain-text output helpers: aligned tables, ages, one-line excerpts. */

export type Align = 'left' | 'right';

/** Columns padded to their widest cell, two spaces apart; no trailing spaces. */
export function renderTable(
  headers: readonly string[],
  rows: readonly (readonly string[])[],
  align: readonly Align[] = [],
): string {
  const widths = headers.map((h, c) => Math.max(h.length, ...rows.map((r) => (r[c] ?? '').length)));
  const line = (cells: readonly string[]): string =>
    widths
      .map((w, c) => {
        const cell = cells[c] ?? '';
        return align[c] === 'right' ? cell.padStart(w) : cell.padEnd(w);
      })
      .join('  ')
      .trimEnd();
  return [line(headers), ...rows.map(line)].join('\n');
}

/** `850ms`, `12.3s`, `4m05s`, `3h04m`, `2d03h`; `-` for none. */
export function formatAge(ms: number): string {
  if (!(ms > 0)) return '-';
  if (ms < 1000) return `${Math.round(ms)}ms`;
  const s = ms / 1000;
  if (s < 60) return `${s.toFixed(1)}s`;
  const two = (n: number): string => String(Math.floor(n)).padStart(2, '0');
  if (s < 3600) return `${Math.floor(s / 60)}m${two(s % 60)}s`;
  if (s < 86_400) return `${Math.floor(s / 3600)}h${two((s % 3600) / 60)}m`;
  return `${Math.floor(s / 86_400)}d${two((s % 86_400) / 3600)}h`;
}

/** The first non-empty line of a text, cut to `max` characters. */
export function firstLine(text: string | null, max = 120): string {
  if (text === null) return '';
  const line = text.split(/\r?\n/).find((l) => l.trim() !== '') ?? '';
  return line.length > max ? `${line.slice(0, max - 1)}…` : line;
}

export function formatTime(d: Date | null): string {
  return d === null ? '-' : d.toISOString();
}

/** A connection URL fit to print: the password replaced. */
export function redactUrl(url: string): string {
  // A redis+cluster:// URL names several hosts, which URL cannot parse: blank the password by hand.
  if (/^rediss?\+cluster:\/\//i.test(url)) return url.replace(/^([^/]+\/\/[^:@/]*:)[^@/]*@/, '$1***@');
  try {
    const u = new URL(url);
    if (u.password !== '') u.password = '***';
    return u.toString();
  } catch {
    return '(unparseable URL)';
  }
}

/** Size of a JSON value as stored, for a field whose content is withheld. */
export function jsonSize(value: unknown): string {
  if (value === null || value === undefined) return '-';
  const text = JSON.stringify(value);
  return `(${Buffer.byteLength(text, 'utf8')} bytes; shown with --payload)`;
}
