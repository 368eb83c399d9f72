import { getJson, postAction, query } from '../api.js';
import { Clip, Empty, ErrorBox, Loading, PageHead, Time } from '../components/bits.js';
import { ConfirmFlow } from '../components/ConfirmFlow.js';
import { count } from '../format.js';
import { usePoll } from '../poll.js';
import { href, navigate } from '../router.js';
import { useSession } from '../session-context.js';
import type { DeadGroup, QueueView } from '../types.js';

function plural(n: number, what: string): string {
  return `${count(n)} ${what}${n === 1 ? '' : 's'}`;
}

function GroupActions({ g, reload }: { g: DeadGroup; reload: () => void }) {
  const filter = { queue: g.queue, type: g.type, failureClass: g.failureClass ?? undefined };
  // A group without a failure class has no filter for it: the replay takes every class of the type
  // (the count says how many).
  const label = `${g.type} / ${g.failureClass ?? 'any failure class'} in ${g.queue}`;
  return (
    <>
      <ConfirmFlow
        label="Replay all…"
        title="Replay this group"
        className="primary"
        describe={(n) =>
          n === 0
            ? `No dead item left in ${label}.`
            : `Replay ${plural(n, 'dead item')} (${label})? Each gets a new item; the dead ones stay as they are.`
        }
        dryRun={async () => (await postAction<{ count: number }>('/api/replay', { ...filter, dryRun: true })).count}
        run={async () => {
          const r = await postAction<{ replayed: number; skipped: number }>('/api/replay', {
            ...filter,
            dryRun: false,
          });
          return `Replayed ${count(r.replayed)}, skipped ${count(r.skipped)}.`;
        }}
        onDone={reload}
      />
      <ConfirmFlow
        label="Purge…"
        title="Purge dead items"
        className="danger"
        describe={(n) =>
          n === 0
            ? `No dead item of type ${g.type} in ${g.queue}.`
            : `Delete ${plural(n, 'dead item')} of type ${g.type} in ${g.queue} ` +
              `(every failure class) from the ledger? This cannot be undone.`
        }
        dryRun={async () =>
          (
            await postAction<{ count: number }>('/api/purge', {
              queue: g.queue,
              state: 'dead',
              type: g.type,
              dryRun: true,
            })
          ).count
        }
        run={async () => {
          const body = { queue: g.queue, state: 'dead', type: g.type, dryRun: false };
          return `Purged ${count((await postAction<{ purged: number }>('/api/purge', body)).purged)}.`;
        }}
        onDone={reload}
      />
    </>
  );
}

function QueuePicker({ queue }: { queue: string | null }) {
  const { data } = usePoll('queue-names', () => getJson<QueueView[]>('/api/queues'), 30_000);
  return (
    <label class="inline">
      Queue{' '}
      <select name="queue" value={queue ?? ''} onChange={(e) => navigate(href.dead(e.currentTarget.value || null))}>
        <option value="">all queues</option>
        {(data ?? []).map((q) => (
          <option key={q.queue} value={q.queue}>
            {q.queue}
          </option>
        ))}
      </select>
    </label>
  );
}

export function DeadPage({ queue }: { queue: string | null }) {
  const { canAct } = useSession();
  const path = `/api/dead${query({ queue })}`;
  const { data, error, reload } = usePoll(path, () => getJson<{ groups: DeadGroup[] }>(path));
  const total = data?.groups.reduce((s, g) => s + g.count, 0) ?? 0;
  return (
    <>
      <PageHead
        title="Dead letters"
        sub={
          data === undefined
            ? undefined
            : `${plural(total, 'dead item')} in ${plural(data.groups.length, 'group')}, ` +
              `by queue, type and failure class`
        }
      >
        <QueuePicker queue={queue} />
      </PageHead>
      <ErrorBox error={error} />
      {data === undefined ? (
        error === undefined && <Loading />
      ) : data.groups.length === 0 ? (
        <Empty>No dead items{queue === null ? '' : ` in ${queue}`}.</Empty>
      ) : (
        <table class="grid dead">
          <thead>
            <tr>
              <th>Queue</th>
              <th>Type</th>
              <th>Failure class</th>
              <th class="num">Count</th>
              <th>Last error</th>
              <th>Last died</th>
              <th>Sample</th>
              {canAct && <th />}
            </tr>
          </thead>
          <tbody>
            {data.groups.map((g) => (
              <tr
                key={`${g.queue}/${g.type}/${g.failureClass ?? ''}`}
                data-group={`${g.queue}/${g.type}/${g.failureClass ?? ''}`}
              >
                <td>
                  <a href={href.items(g.queue, { state: 'dead' })}>{g.queue}</a>
                </td>
                <td>
                  <a href={href.items(g.queue, { state: 'dead', type: g.type })}>{g.type}</a>
                </td>
                <td>
                  {g.failureClass === null ? (
                    <span class="muted">–</span>
                  ) : (
                    <span class="badge failure">{g.failureClass}</span>
                  )}
                </td>
                <td class="num count-dead">{count(g.count)}</td>
                <td class="error-cell">
                  <Clip text={g.lastError} max={110} />
                </td>
                <td>
                  <Time iso={g.lastAt} />
                </td>
                <td class="mono">
                  <a href={href.item(g.sampleId)}>{g.sampleId}</a>
                </td>
                {canAct && (
                  <td class="buttons">
                    <GroupActions g={g} reload={reload} />
                  </td>
                )}
              </tr>
            ))}
          </tbody>
        </table>
      )}
    </>
  );
}
