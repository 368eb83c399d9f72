import { useEffect, useState } from 'preact/hooks';
import { enc, getJson, postAction, query } from '../api.js';
import { Empty, ErrorBox, Loading, PageHead } from '../components/bits.js';
import { ConfirmFlow } from '../components/ConfirmFlow.js';
import { ItemTable, Pager } from '../components/ItemTable.js';
import { count } from '../format.js';
import { usePoll } from '../poll.js';
import { href, navigate } from '../router.js';
import { useSession } from '../session-context.js';
import { ITEM_STATES, TERMINAL_STATES, type ItemFilter, type ItemSummary, type Page } from '../types.js';

const TEXT_FIELDS = [
  ['type', 'Type'],
  ['lane', 'Lane'],
  ['key', 'Concurrency key'],
  ['idempotencyKey', 'Idempotency key'],
  ['id', 'Id'],
] as const;

function FilterForm({ queue, filter }: { queue: string; filter: ItemFilter }) {
  const [draft, setDraft] = useState<ItemFilter>(filter);
  useEffect(() => setDraft(filter), [JSON.stringify(filter)]);
  return (
    <form
      class="filters"
      onSubmit={(e) => {
        e.preventDefault();
        navigate(href.items(queue, draft));
      }}
    >
      {TEXT_FIELDS.map(([k, label]) => (
        <label key={k}>
          {label}
          <input
            name={k}
            type="text"
            value={draft[k] ?? ''}
            onInput={(e) => setDraft({ ...draft, [k]: e.currentTarget.value.trim() || undefined })}
          />
        </label>
      ))}
      <button type="submit" class="primary">
        Filter
      </button>
      <a class="button" href={href.items(queue, filter.state === undefined ? {} : { state: filter.state })}>
        Clear
      </a>
    </form>
  );
}

/** How long ago a purged item must have ended: the purge's `olderThanMs`. */
const PURGE_AGES = [
  ['any age', undefined],
  ['over an hour ago', 3_600_000],
  ['over a day ago', 86_400_000],
  ['over 7 days ago', 7 * 86_400_000],
  ['over 30 days ago', 30 * 86_400_000],
] as const;

function BulkActions({ queue, filter, reload }: { queue: string; filter: ItemFilter; reload: () => void }) {
  const { state, type, lane, key, idempotencyKey, id } = filter;
  const [age, setAge] = useState(0);
  const [ageText, olderThanMs] = PURGE_AGES[age] ?? PURGE_AGES[0];
  const ended = olderThanMs === undefined ? '' : ` that ended ${ageText}`;
  const byIdentity = idempotencyKey !== undefined || id !== undefined;
  const what = [
    type !== undefined && `type ${type}`,
    lane !== undefined && `lane ${lane}`,
    key !== undefined && `key ${key}`,
  ]
    .filter(Boolean)
    .join(', ');
  const scope = `in queue ${queue}${what === '' ? '' : ` (${what})`}`;
  return (
    <>
      {state === 'dead' && !byIdentity && (
        <ConfirmFlow
          label="Replay all matching…"
          title="Replay dead items"
          className="primary"
          describe={(n) =>
            n === 0
              ? `No dead item ${scope}.`
              : `Replay ${count(n)} dead item${n === 1 ? '' : 's'} ${scope}? ` +
                `Each gets a new item; the dead ones stay as they are.`
          }
          dryRun={async () =>
            (await postAction<{ count: number }>('/api/replay', { queue, type, lane, key, dryRun: true })).count
          }
          run={async () => {
            const r = await postAction<{ replayed: number; skipped: number }>('/api/replay', {
              queue,
              type,
              lane,
              key,
              dryRun: false,
            });
            return `Replayed ${count(r.replayed)}, skipped ${count(r.skipped)}.`;
          }}
          onDone={reload}
        />
      )}
      {state !== undefined &&
        TERMINAL_STATES.includes(state) &&
        !byIdentity &&
        lane === undefined &&
        key === undefined && (
          <label class="inline">
            ended
            <select name="purge-age" value={age} onChange={(e) => setAge(Number(e.currentTarget.value))}>
              {PURGE_AGES.map(([text], i) => (
                <option key={text} value={i}>
                  {text}
                </option>
              ))}
            </select>
          </label>
        )}
      {state !== undefined &&
        TERMINAL_STATES.includes(state) &&
        !byIdentity &&
        lane === undefined &&
        key === undefined && (
          <ConfirmFlow
            label={`Purge ${state}…`}
            title={`Purge ${state} items`}
            className="danger"
            describe={(n) =>
              n === 0
                ? `No ${state} item in queue ${queue}${type === undefined ? '' : ` of type ${type}`}${ended}.`
                : `Delete ${count(n)} ${state} item${n === 1 ? '' : 's'} of queue ` +
                  `${queue}${type === undefined ? '' : ` of type ${type}`}${ended} ` +
                  `from the ledger? This cannot be undone.`
            }
            dryRun={async () =>
              (await postAction<{ count: number }>('/api/purge', { queue, state, type, olderThanMs, dryRun: true }))
                .count
            }
            run={async () => {
              const body = { queue, state, type, olderThanMs, dryRun: false };
              return `Purged ${count((await postAction<{ purged: number }>('/api/purge', body)).purged)}.`;
            }}
            onDone={reload}
          />
        )}
    </>
  );
}

export function ItemsPage({ queue, filter, after }: { queue: string; filter: ItemFilter; after: string | null }) {
  const { canAct } = useSession();
  const path = `/api/queues/${enc(queue)}/items${query({ ...filter, after, limit: 50 })}`;
  const { data, error, reload } = usePoll(path, () => getJson<Page<ItemSummary>>(path));
  return (
    <>
      <PageHead
        title={
          <>
            <a href={href.queues()} class="crumb">
              Queues
            </a>{' '}
            / {queue}
          </>
        }
        sub={<a href={href.lanes(queue)}>Lanes of this queue</a>}
      >
        {canAct && <BulkActions queue={queue} filter={filter} reload={reload} />}
      </PageHead>
      <nav class="tabs">
        <a
          href={href.items(queue, { ...filter, state: undefined })}
          class={filter.state === undefined ? 'current' : ''}
        >
          all
        </a>
        {ITEM_STATES.map((s) => (
          <a key={s} href={href.items(queue, { ...filter, state: s })} class={filter.state === s ? 'current' : ''}>
            {s}
          </a>
        ))}
      </nav>
      <FilterForm queue={queue} filter={filter} />
      <ErrorBox error={error} />
      {data === undefined ? (
        error === undefined && <Loading />
      ) : data.items.length === 0 && data.next === null ? (
        <Empty>No {filter.state ?? ''} items match.</Empty>
      ) : (
        <>
          {data.items.length === 0 ? (
            // A filter the index does not hold reads a bounded stretch of it per page: this one held no match.
            <Empty>No match among the items this page looked at; older items may match: see the next page.</Empty>
          ) : (
            <ItemTable items={data.items} />
          )}
          <Pager
            next={data.next}
            onFirstPage={after === null}
            first={href.items(queue, filter)}
            nextHref={(c) => href.items(queue, filter, c)}
          />
        </>
      )}
    </>
  );
}
