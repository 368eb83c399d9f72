import { enc, getJson, query } from '../api.js';
import { Empty, ErrorBox, Loading, PageHead } from '../components/bits.js';
import { ItemTable, Pager } from '../components/ItemTable.js';
import { usePoll } from '../poll.js';
import { href } from '../router.js';
import type { ItemSummary, Page } from '../types.js';

export function LanePage({ queue, lane, after }: { queue: string; lane: string; after: string | null }) {
  const path = `/api/queues/${enc(queue)}/lanes/${enc(lane)}/items${query({ after, limit: 50 })}`;
  const { data, error } = usePoll(path, () => getJson<Page<ItemSummary>>(path));
  return (
    <>
      <PageHead
        title={
          <>
            <a href={href.queues()} class="crumb">
              Queues
            </a>{' '}
            / <a href={href.items(queue)}>{queue}</a> / <a href={href.lanes(queue)}>lanes</a> / {lane}
          </>
        }
        sub="In lane order: only the head may run; the rest wait behind it"
      />
      <ErrorBox error={error} />
      {data === undefined ? (
        error === undefined && <Loading />
      ) : data.items.length === 0 && data.next === null ? (
        <Empty>This lane holds no items.</Empty>
      ) : (
        <>
          <ItemTable items={data.items} laneOrder />
          <Pager
            next={data.next}
            onFirstPage={after === null}
            first={href.lane(queue, lane)}
            nextHref={(c) => href.lane(queue, lane, c)}
          />
        </>
      )}
    </>
  );
}
