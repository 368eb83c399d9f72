import { getJson } from '../api.js';
import { Empty, ErrorBox, Loading, PageHead, Time } from '../components/bits.js';
import { absolute, count, duration } from '../format.js';
import { usePoll } from '../poll.js';
import { href } from '../router.js';
import type { ScheduleView } from '../types.js';

function timing(s: ScheduleView): string {
  if (s.everyMs !== null) return `every ${duration(s.everyMs)}`;
  return `${s.pattern ?? '?'}${s.tz !== null ? ` (${s.tz})` : ' (UTC)'}`;
}

/** The ledger's recurring schedules: how each fires, its next and last fire, paused or not. */
export function SchedulesPage() {
  const path = '/api/schedules';
  const { data, error } = usePoll(path, () => getJson<{ now: string; schedules: ScheduleView[] }>(path));
  return (
    <>
      <PageHead
        title="Schedules"
        sub="Recurring schedules held by the ledger; each fire enqueues one item, keyed <name>:<fire time ms>"
      />
      <ErrorBox error={error} />
      {data === undefined ? (
        error === undefined && <Loading />
      ) : data.schedules.length === 0 ? (
        <Empty>No schedules. Declare them in a worker's config file (schedules:) or with producer.schedule.</Empty>
      ) : (
        <table class="grid schedules">
          <thead>
            <tr>
              <th>Name</th>
              <th>Source</th>
              <th>Fires</th>
              <th>Enqueues</th>
              <th>Next fire</th>
              <th>Last fire</th>
              <th class="num">Fired</th>
              <th>Missed fires</th>
            </tr>
          </thead>
          <tbody>
            {data.schedules.map((s) => (
              <tr key={s.name} data-schedule={s.name}>
                <td class="mono">{s.name}</td>
                <td>{s.source === 'config' ? 'config file' : 'API'}</td>
                <td class="mono">{timing(s)}</td>
                <td>
                  <a href={href.items(s.item.queue, { type: s.item.type })}>
                    {s.item.queue} / {s.item.type}
                  </a>
                </td>
                <td title={absolute(s.nextFireAt)}>
                  {s.paused ? (
                    <span class="badge paused">paused</span>
                  ) : (
                    `in ${duration(Math.max(0, Date.parse(s.nextFireAt) - Date.parse(data.now)))}`
                  )}
                </td>
                <td>
                  <Time iso={s.lastFireAt} />
                </td>
                <td class="num">{count(s.fires)}</td>
                <td>{s.backfillMs > 0 ? `backfilled up to ${duration(s.backfillMs)}` : 'skipped'}</td>
              </tr>
            ))}
          </tbody>
        </table>
      )}
    </>
  );
}
