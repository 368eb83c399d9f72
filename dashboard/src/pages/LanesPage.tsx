import { enc, getJson, query } from '../api.js';
import { Empty, ErrorBox, Loading, PageHead, StateBadge } from '../components/bits.js';
import { count, duration } from '../format.js';
import { usePoll } from '../poll.js';
import { href } from '../router.js';
import type { LaneView } from '../types.js';

export function LanesPage({ queue }: { queue: string }) {
  const path = `/api/queues/${enc(queue)}/lanes${query({ limit: 100 })}`;
  const { data, error } = usePoll(path, () => getJson<{ lanes: LaneView[] }>(path));
  return (
    <>
      <PageHead
        title={
          <>
            <a href={href.queues()} class="crumb">
              Queues
            </a>{' '}
            / <a href={href.items(queue)}>{queue}</a> / lanes
          </>
        }
        sub="Lanes with items waiting, the longest-waiting first"
      />
      <ErrorBox error={error} />
      {data === undefined ? (
        error === undefined && <Loading />
      ) : data.lanes.length === 0 ? (
        <Empty>No lane has an item waiting.</Empty>
      ) : (
        <table class="grid lanes">
          <thead>
            <tr>
              <th>Lane</th>
              <th>Head</th>
              <th>Head state</th>
              <th class="num">Waiting</th>
              <th class="num">Pending</th>
            </tr>
          </thead>
          <tbody>
            {data.lanes.map((l) => (
              <tr key={l.lane}>
                <td>
                  <a href={href.lane(queue, l.lane)}>{l.lane}</a>
                </td>
                <td class="mono">
                  {l.headId === null ? <span class="muted">–</span> : <a href={href.item(l.headId)}>{l.headId}</a>}
                </td>
                <td>{l.headState === null ? <span class="muted">–</span> : <StateBadge state={l.headState} />}</td>
                <td class="num">{duration(l.waitingMs)}</td>
                <td class="num">{count(l.pending)}</td>
              </tr>
            ))}
          </tbody>
        </table>
      )}
    </>
  );
}
