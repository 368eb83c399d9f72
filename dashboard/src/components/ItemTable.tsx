import { count } from '../format.js';
import { href } from '../router.js';
import type { ItemSummary } from '../types.js';
import { Clip, StateBadge, Time } from './bits.js';

/** When the item did what it last did: ended, started, or is due. */
function When({ item }: { item: ItemSummary }) {
  if (item.terminalAt !== null) return <Time iso={item.terminalAt} />;
  if (item.startedAt !== null && item.state === 'processing') return <Time iso={item.startedAt} />;
  if (item.runAfter !== null && Date.parse(item.runAfter) > Date.now()) return <Time iso={item.runAfter} />;
  return <Time iso={item.createdAt} />;
}

export function ItemTable({
  items,
  showQueue = false,
  laneOrder = false,
}: {
  items: ItemSummary[];
  showQueue?: boolean;
  laneOrder?: boolean;
}) {
  return (
    <table class="grid items">
      <thead>
        <tr>
          {laneOrder && <th class="num">Seq</th>}
          <th>Id</th>
          {showQueue && <th>Queue</th>}
          <th>Type</th>
          <th>State</th>
          {!laneOrder && <th>Lane</th>}
          <th>Key</th>
          <th class="num">Attempt</th>
          <th>Created</th>
          <th title="Ended, started, or due">Last change</th>
          <th>Error</th>
        </tr>
      </thead>
      <tbody>
        {items.map((it) => (
          <tr key={it.id} class={it.isHead ? 'head-row' : ''} data-id={it.id}>
            {laneOrder && (
              <td class="num">
                {it.isHead && <span class="badge head head-mark">head</span>}
                {it.laneSeq ?? '–'}
              </td>
            )}
            <td class="mono">
              <a href={href.item(it.id)}>{it.id}</a>
            </td>
            {showQueue && <td>{it.queue}</td>}
            <td>{it.type}</td>
            <td>
              <StateBadge state={it.state} />
            </td>
            {!laneOrder && (
              <td>
                {it.lane === null ? (
                  <span class="muted">–</span>
                ) : (
                  <>
                    <a href={href.lane(it.queue, it.lane)}>{it.lane}</a>
                    {it.isHead && <span class="badge head">head</span>}
                  </>
                )}
              </td>
            )}
            <td>{it.concurrencyKey ?? <span class="muted">–</span>}</td>
            <td class="num">
              {count(it.attempt)}/{count(it.maxAttempts)}
            </td>
            <td>
              <Time iso={it.createdAt} />
            </td>
            <td>
              <When item={it} />
            </td>
            <td class="error-cell">
              {it.failureClass !== null && <span class="badge failure">{it.failureClass}</span>}
              <Clip text={it.lastError} max={90} />
            </td>
          </tr>
        ))}
      </tbody>
    </table>
  );
}

/** "Next page" of a keyset list, and back to its first page. */
export function Pager({
  next,
  first,
  nextHref,
  onFirstPage,
}: {
  next: string | null;
  first: string;
  nextHref: (cursor: string) => string;
  onFirstPage: boolean;
}) {
  if (next === null && onFirstPage) return null;
  return (
    <div class="pager">
      {!onFirstPage && <a href={first}>← First page</a>}
      {next !== null && (
        <a href={nextHref(next)} class="next">
          Next page →
        </a>
      )}
    </div>
  );
}
