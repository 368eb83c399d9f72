import type { ComponentChildren } from 'preact';
import { useState } from 'preact/hooks';
import { requireCredentials } from '../session.js';
import { Dialog } from './Dialog.js';

type Step =
  | { at: 'idle' }
  | { at: 'counting' }
  | { at: 'confirm'; count: number }
  | { at: 'running'; count: number }
  | { at: 'done'; text: string }
  | { at: 'failed'; text: string };

/**
 * A bulk action in three steps: the dry run's count first, the operator's confirmation, then the result.
 * `dryRun` answers how many items the action would touch; `run` does it and says what happened.
 */
export function ConfirmFlow({
  label,
  title,
  describe,
  dryRun,
  run,
  onDone,
  className,
}: {
  label: ComponentChildren;
  title: string;
  /** What the action will do to `count` items, in a sentence. */
  describe: (count: number) => ComponentChildren;
  dryRun: () => Promise<number>;
  run: () => Promise<string>;
  onDone?: () => void;
  className?: string;
}) {
  const [step, setStep] = useState<Step>({ at: 'idle' });
  const fail = (e: unknown): void => setStep({ at: 'failed', text: e instanceof Error ? e.message : String(e) });

  const start = async (): Promise<void> => {
    if ((await requireCredentials()) === null) return;
    setStep({ at: 'counting' });
    try {
      setStep({ at: 'confirm', count: await dryRun() });
    } catch (e) {
      fail(e);
    }
  };
  const go = async (count: number): Promise<void> => {
    setStep({ at: 'running', count });
    try {
      setStep({ at: 'done', text: await run() });
      onDone?.();
    } catch (e) {
      fail(e);
    }
  };
  const close = (): void => setStep({ at: 'idle' });

  return (
    <>
      <button type="button" class={className} onClick={() => void start()}>
        {label}
      </button>
      {step.at !== 'idle' && (
        <Dialog title={title} onClose={close}>
          {step.at === 'counting' && <p class="muted">Counting…</p>}
          {(step.at === 'confirm' || step.at === 'running') && (
            <>
              <p class="confirm-text">{describe(step.count)}</p>
              <div class="dialog-buttons">
                <button type="button" onClick={close} disabled={step.at === 'running'}>
                  Cancel
                </button>
                <button
                  type="button"
                  class="primary danger"
                  disabled={step.count === 0 || step.at === 'running'}
                  onClick={() => void go(step.count)}
                >
                  {step.at === 'running' ? 'Working…' : `Confirm (${step.count})`}
                </button>
              </div>
            </>
          )}
          {step.at === 'done' && (
            <>
              <p class="result-text" role="status">
                {step.text}
              </p>
              <div class="dialog-buttons">
                <button type="button" class="primary" onClick={close}>
                  Close
                </button>
              </div>
            </>
          )}
          {step.at === 'failed' && (
            <>
              <p class="error-box" role="alert">
                {step.text}
              </p>
              <div class="dialog-buttons">
                <button type="button" onClick={close}>
                  Close
                </button>
              </div>
            </>
          )}
        </Dialog>
      )}
    </>
  );
}
