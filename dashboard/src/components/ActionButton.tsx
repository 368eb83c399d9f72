import type { ComponentChildren } from 'preact';
import { useState } from 'preact/hooks';
import { requireCredentials } from '../session.js';
import { Dialog } from './Dialog.js';

/**
 * One action button: asks for the token if this session has none, runs `act`, and shows its error beside
 * the button (or, with `confirm`, asks first).
 */
export function ActionButton({
  act,
  children,
  confirm,
  className,
  onDone,
}: {
  act: () => Promise<unknown>;
  children: ComponentChildren;
  confirm?: string;
  className?: string;
  onDone?: (result: unknown) => void;
}) {
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState<string | null>(null);
  const [asking, setAsking] = useState(false);
  const run = async (): Promise<void> => {
    setAsking(false);
    setError(null);
    if ((await requireCredentials()) === null) return;
    setBusy(true);
    try {
      const result = await act();
      onDone?.(result);
    } catch (e) {
      setError(e instanceof Error ? e.message : String(e));
    } finally {
      setBusy(false);
    }
  };
  return (
    <span class="action">
      <button
        type="button"
        class={className}
        disabled={busy}
        onClick={() => (confirm === undefined ? void run() : setAsking(true))}
      >
        {children}
      </button>
      {asking && (
        <Dialog title="Are you sure?" onClose={() => setAsking(false)}>
          <p class="confirm-text">{confirm}</p>
          <div class="dialog-buttons">
            <button type="button" onClick={() => setAsking(false)}>
              No
            </button>
            <button type="button" class="primary danger" onClick={() => void run()}>
              Yes
            </button>
          </div>
        </Dialog>
      )}
      {error !== null && (
        <span class="action-error" role="alert">
          {error}
        </span>
      )}
    </span>
  );
}
