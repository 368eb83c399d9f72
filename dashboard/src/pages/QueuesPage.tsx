import { enc, getJson, postAction } from '../api.js';
import { ActionButton } from '../components/ActionButton.js';
import { Empty, ErrorBox, Loading, PageHead, Time } from '../components/bits.js';
import { LatencySpark, ThroughputSpark } from '../components/Sparkline.js';
import { boundedCount, duration, sumCounts } from '../format.js';
import { usePoll } from '../poll.js';
import { href } from '../router.js';
import { useSession } from '../session-context.js';
import type { BoundedCount, ItemState, LiveConsumer, QueueView } from '../types.js';

function Count({ q, state, n }: { q: QueueView; state: ItemState; n: BoundedCount }) {
  if (n.count === 0) return <span class="zero">0</span>;
  return (
    <a href={href.items(q.queue, { state })} class={state === 'dead' ? 'count-dead' : ''}>
      {boundedCount(n)}
    </a>
  );
}

function QueueRow({ q, canAct, reload }: { q: QueueView; canAct: boolean; reload: () => void }) {
  const c = q.counts;
  const finished = sumCounts([c.completed, c.skipped, c.cancelled]);
  return (
    <tr class={q.paused ? 'paused-row' : ''} data-queue={q.queue}>
      <td class="name">
        <a href={href.items(q.queue)}>{q.queue}</a>
        {q.paused && <span class="badge paused">paused</span>}
        {q.staleOnly && (
          <span
            class="badge paused"
            title="claims only rescued work (expired leases), no new pending work: lanewake stale-only"
          >
            stale-only
          </span>
        )}
        <div class="row-links">
          <a href={href.lanes(q.queue)}>lanes</a>
        </div>
      </td>
      <td class="num">
        <Count q={q} state="pending" n={q.due} />
      </td>
      <td class="num">
        {q.scheduled.count === 0 ? (
          <span class="zero">0</span>
        ) : (
          <a href={href.items(q.queue, { state: 'pending' })}>{boundedCount(q.scheduled)}</a>
        )}
      </td>
      <td class="num">
        <Count q={q} state="processing" n={c.processing} />
      </td>
      <td class="num">
        <Count q={q} state="blocked" n={c.blocked} />
      </td>
      <td class="num">
        <Count q={q} state="dead" n={c.dead} />
      </td>
      <td class="num">
        {finished.count === 0 ? (
          <span class="zero">0</span>
        ) : (
          <a href={href.items(q.queue, { state: 'completed' })}>{boundedCount(finished)}</a>
        )}
      </td>
      <td class="num">{q.oldestDueAgeMs > 0 ? duration(q.oldestDueAgeMs) : <span class="zero">–</span>}</td>
      <td>
        <ThroughputSpark points={q.series.points} bucketMs={q.series.bucketMs} />
      </td>
      <td>
        <LatencySpark points={q.series.points} />
      </td>
      <td class="num" title={q.consumers.map((x) => x.name).join('\n')}>
        {q.consumers.length === 0 ? <span class="warn-text">none</span> : q.consumers.length}
      </td>
      {canAct && (
        <td class="buttons">
          {q.paused ? (
            <ActionButton act={() => postAction(`/api/queues/${enc(q.queue)}/resume`, {})} onDone={reload}>
              Resume
            </ActionButton>
          ) : (
            <ActionButton act={() => postAction(`/api/queues/${enc(q.queue)}/pause`, {})} onDone={reload}>
              Pause
            </ActionButton>
          )}
        </td>
      )}
    </tr>
  );
}

function Consumers({ consumers }: { consumers: LiveConsumer[] }) {
  if (consumers.length === 0) return <Empty>No consumer has sent a heartbeat lately.</Empty>;
  return (
    <table class="grid">
      <thead>
        <tr>
          <th>Consumer</th>
          <th>Queue</th>
          <th>Classes</th>
          <th>Types</th>
          <th class="num">Concurrency</th>
          <th class="num">Epoch</th>
          <th>Version</th>
          <th>Started</th>
          <th>Last seen</th>
        </tr>
      </thead>
      <tbody>
        {consumers.map((x) => (
          <tr key={`${x.queue}/${x.name}`}>
            <td class="mono">{x.name}</td>
            <td>{x.queue}</td>
            <td>{x.classes.join(', ')}</td>
            <td>{x.types === null ? <span class="muted">all</span> : x.types.join(', ')}</td>
            <td class="num">
              {x.concurrency}
              {x.maxProcessing !== null && <span class="muted"> (cap {x.maxProcessing})</span>}
            </td>
            <td class="num">{x.epoch ?? <span class="muted">–</span>}</td>
            <td>{x.version}</td>
            <td>
              <Time iso={x.startedAt} />
            </td>
            <td>
              <Time iso={x.lastSeen} />
            </td>
          </tr>
        ))}
      </tbody>
    </table>
  );
}

export function QueuesPage() {
  const { canAct } = useSession();
  const { data, error, reload } = usePoll('queues', () => getJson<QueueView[]>('/api/queues'));
  return (
    <>
      <PageHead title="Queues" sub="Depth by state now; throughput and enqueue→start latency over the last hour" />
      <ErrorBox error={error} />
      {data === undefined ? (
        error === undefined && <Loading />
      ) : data.length === 0 ? (
        <Empty>No queue has items yet.</Empty>
      ) : (
        <>
          <table class="grid queues">
            <thead>
              <tr>
                <th>Queue</th>
                <th class="num" title="Pending items whose run-after has come">
                  Due
                </th>
                <th class="num" title="Pending items not due yet">
                  Scheduled
                </th>
                <th class="num">Running</th>
                <th class="num" title="Waiting on a dependency">
                  Blocked
                </th>
                <th class="num">Dead</th>
                <th class="num" title="Completed, skipped and cancelled items still kept">
                  Finished
                </th>
                <th class="num" title="How long the oldest due lane head has waited">
                  Oldest due
                </th>
                <th>Throughput (1 h)</th>
                <th>Enqueue→start</th>
                <th class="num">Consumers</th>
                {canAct && <th />}
              </tr>
            </thead>
            <tbody>
              {data.map((q) => (
                <QueueRow key={q.queue} q={q} canAct={canAct} reload={reload} />
              ))}
            </tbody>
          </table>
          <h2>Live consumers</h2>
          <Consumers consumers={data.flatMap((q) => q.consumers)} />
        </>
      )}
    </>
  );
}
