import type { ComponentChildren } from 'preact';
import { ApiError, enc, getJson, postAction } from '../api.js';
import { ActionButton } from '../components/ActionButton.js';
import { Clip, Empty, ErrorBox, Loading, PageHead, StateBadge, Time } from '../components/bits.js';
import { absolute, count, duration, json } from '../format.js';
import { usePoll } from '../poll.js';
import { href, navigate } from '../router.js';
import { useSession } from '../session-context.js';
import { TERMINAL_STATES, type ItemDetail, type ItemResponse } from '../types.js';

function Field({ label, children }: { label: string; children: ComponentChildren }) {
  return (
    <>
      <dt>{label}</dt>
      <dd>{children}</dd>
    </>
  );
}

function Dash() {
  return <span class="muted">–</span>;
}

function At({ iso }: { iso: string | null }) {
  if (iso === null) return <Dash />;
  return (
    <>
      {absolute(iso)}{' '}
      <span class="muted">
        (<Time iso={iso} />)
      </span>
    </>
  );
}

function ItemLink({ id }: { id: string | null }) {
  return id === null ? (
    <Dash />
  ) : (
    <a href={href.item(id)} class="mono">
      {id}
    </a>
  );
}

function Fields({ item }: { item: ItemDetail }) {
  return (
    <dl class="fields">
      <Field label="Queue">
        <a href={href.items(item.queue)}>{item.queue}</a>
      </Field>
      <Field label="Type">
        <a href={href.items(item.queue, { type: item.type })}>{item.type}</a>
      </Field>
      <Field label="State">
        <StateBadge state={item.state} />
        {item.cancelRequested && <span class="badge failure">cancel requested</span>}
      </Field>
      <Field label="Lane">
        {item.lane === null ? (
          <Dash />
        ) : (
          <>
            <a href={href.lane(item.queue, item.lane)}>{item.lane}</a> <span class="muted">#{item.laneSeq ?? '?'}</span>
            {item.isHead && <span class="badge head">head</span>}
          </>
        )}
      </Field>
      <Field label="Concurrency key">{item.concurrencyKey ?? <Dash />}</Field>
      <Field label="Class / priority">
        {item.queueClass} / {item.priority}
      </Field>
      <Field label="Attempt">
        {count(item.attempt)} of {count(item.maxAttempts)}
      </Field>
      <Field label="Failure class">
        {item.failureClass === null ? <Dash /> : <span class="badge failure">{item.failureClass}</span>}
      </Field>
      <Field label="Created">
        <At iso={item.createdAt} />
      </Field>
      <Field label="Run after">
        <At iso={item.runAfter} />
      </Field>
      <Field label="Started">
        <At iso={item.startedAt} />
      </Field>
      <Field label="Ended">
        <At iso={item.terminalAt} />
      </Field>
      <Field label="Lease">
        {item.leaseOwner === null ? (
          <Dash />
        ) : item.leaseUntil === null || item.state !== 'processing' ? (
          <>
            <span class="mono">{item.leaseOwner}</span> <span class="muted">(last holder)</span>
          </>
        ) : (
          <>
            <span class="mono">{item.leaseOwner}</span> until <At iso={item.leaseUntil} />
          </>
        )}
      </Field>
      <Field label="Idempotency key">{item.idempotencyKey ?? <Dash />}</Field>
      <Field label="Dependency key">{item.dependencyKey ?? <Dash />}</Field>
      <Field label="Replay of">
        <ItemLink id={item.replayOf} />
      </Field>
      <Field label="Group head">
        <ItemLink id={item.groupHead} />
      </Field>
    </dl>
  );
}

function Block({ title, children }: { title: string; children: ComponentChildren }) {
  return (
    <section class="block">
      <h2>{title}</h2>
      {children}
    </section>
  );
}

function Json({ value }: { value: unknown }) {
  if (value === null || value === undefined) return <Empty>None.</Empty>;
  return <pre class="json">{json(value)}</pre>;
}

function Actions({ item, reload }: { item: ItemDetail; reload: () => void }) {
  const replayable = item.state === 'dead' || item.state === 'cancelled';
  const cancellable = !TERMINAL_STATES.includes(item.state) && !item.cancelRequested;
  return (
    <>
      {replayable && (
        <ActionButton
          className="primary"
          act={() =>
            postAction<{ id: string }>(`/api/items/${enc(item.id)}/replay`, {
              expectAttempt: item.attempt,
              expectErrorDigest: item.errorDigest,
            })
          }
          onDone={(r) => navigate(href.item((r as { id: string }).id))}
        >
          Replay
        </ActionButton>
      )}
      {replayable && (
        <ActionButton
          act={() => {
            const reason = window.prompt(
              `Repair item ${item.id} in place? It goes back to pending with its id ` +
                `and lane place, and its lane's pending items wait behind it. Why?`,
            );
            if (reason === null || reason.trim() === '') return Promise.reject(new Error('not repaired: say why'));
            return postAction(`/api/items/${enc(item.id)}/repair`, {
              expectAttempt: item.attempt,
              expectErrorDigest: item.errorDigest,
              reason,
            });
          }}
          onDone={reload}
        >
          Repair
        </ActionButton>
      )}
      {cancellable && (
        <ActionButton
          className="danger"
          confirm={`Cancel item ${item.id}? A running handler is asked to stop; a waiting item never runs.`}
          act={() => postAction(`/api/items/${enc(item.id)}/cancel`, { reason: 'cancelled from the dashboard' })}
          onDone={reload}
        >
          Cancel
        </ActionButton>
      )}
    </>
  );
}

export function ItemPage({ id }: { id: string }) {
  const { canAct, showPayloads } = useSession();
  const path = `/api/items/${enc(id)}`;
  const { data, error, reload } = usePoll(path, () => getJson<ItemResponse>(path));
  if (data === undefined)
    return error === undefined ? (
      <Loading />
    ) : (
      <ErrorBox error={error instanceof ApiError && error.status === 404 ? new Error(`No item ${id}`) : error} />
    );
  const { item, attempts, steps, group, why } = data;
  // The stages column only when an attempt timed any (ctx.stage).
  const staged = attempts.some((a) => a.stages !== undefined && a.stages.length > 0);
  return (
    <>
      <PageHead
        title={
          <>
            <a href={href.items(item.queue)} class="crumb">
              {item.queue}
            </a>{' '}
            / <span class="mono">{item.id}</span>
          </>
        }
        sub={
          <>
            {item.type} · <StateBadge state={item.state} />
          </>
        }
      >
        {canAct && <Actions item={item} reload={reload} />}
      </PageHead>
      <ErrorBox error={error} />
      <div class={`why why-${why.code}`} data-code={why.code}>
        <strong>Why {item.state}:</strong> {why.message}
        {Object.keys(why.details).length > 0 && (
          <span class="why-details">
            {Object.entries(why.details).map(([k, v]) => (
              <span key={k}>
                {k}: <span class="mono">{v === null ? '–' : String(v)}</span>
              </span>
            ))}
          </span>
        )}
      </div>
      <div class="columns">
        <Block title="Fields">
          <Fields item={item} />
        </Block>
        <div>
          {item.lastError !== null && (
            <Block title={item.state === 'skipped' ? 'Skipped because' : 'Last error'}>
              <pre class="error-text">{item.lastError}</pre>
            </Block>
          )}
          {item.progress !== null && item.progress !== undefined && (
            <Block title="Progress">
              <Json value={item.progress} />
            </Block>
          )}
          {item.result !== null && item.result !== undefined && (
            <Block title="Result">
              <Json value={item.result} />
            </Block>
          )}
          {item.checkpoint !== null && item.checkpoint !== undefined && (
            <Block title="Checkpoint">
              <Json value={item.checkpoint} />
            </Block>
          )}
          {showPayloads && (
            <Block title="Payload">
              <Json value={item.payload} />
            </Block>
          )}
        </div>
      </div>
      <Block title={`Attempts (${attempts.length})`}>
        {attempts.length === 0 ? (
          <Empty>No attempt recorded.</Empty>
        ) : (
          <table class="grid">
            <thead>
              <tr>
                <th class="num">#</th>
                <th>Outcome</th>
                <th>Failure class</th>
                <th>Worker</th>
                <th>Started</th>
                <th>Ended</th>
                <th>Error</th>
                {staged && <th>Stages</th>}
              </tr>
            </thead>
            <tbody>
              {attempts.map((a) => (
                <tr key={`${a.attempt}-${a.endedAt}`}>
                  <td class="num">{a.attempt}</td>
                  <td>
                    <span class={`badge outcome-${a.outcome}`}>{a.outcome}</span>
                  </td>
                  <td>{a.failureClass ?? <Dash />}</td>
                  <td class="mono">{a.worker ?? <Dash />}</td>
                  <td>
                    <Time iso={a.startedAt} />
                  </td>
                  <td>
                    <Time iso={a.endedAt} />
                  </td>
                  <td class="error-cell">
                    <Clip text={a.error} max={160} />
                  </td>
                  {staged && <td>{a.stages?.map((s) => `${s.name} ${duration(s.ms)}`).join(', ') || <Dash />}</td>}
                </tr>
              ))}
            </tbody>
          </table>
        )}
      </Block>
      {steps.length > 0 && (
        <Block title={`Steps (${steps.length})`}>
          <table class="grid">
            <thead>
              <tr>
                <th>Step</th>
                <th class="num">Attempt</th>
                <th>Done</th>
                <th>Result</th>
              </tr>
            </thead>
            <tbody>
              {steps.map((s) => (
                <tr key={s.name}>
                  <td class="mono">{s.name}</td>
                  <td class="num">{s.attempt}</td>
                  <td>
                    <Time iso={s.doneAt} />
                  </td>
                  <td class="mono">
                    <Clip text={JSON.stringify(s.result) ?? '–'} max={120} />
                  </td>
                </tr>
              ))}
            </tbody>
          </table>
        </Block>
      )}
      {group.length > 0 && (
        <Block title={`Coalesced group (${group.length})`}>
          <ul class="group">
            {group.map((g) => (
              <li key={g}>
                <ItemLink id={g} />
                {g === item.id && <span class="muted"> (this item)</span>}
              </li>
            ))}
          </ul>
        </Block>
      )}
    </>
  );
}
