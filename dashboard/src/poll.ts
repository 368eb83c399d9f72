import { useCallback, useEffect, useRef, useState } from 'preact/hooks';

export const POLL_MS = 2_000;

export interface Polled<T> {
  data: T | undefined;
  error: Error | undefined;
  /** Fetch again now (after an action). */
  reload: () => void;
}

/**
 * Fetches `load()` now and every `intervalMs` while the tab is visible; a change of `key` starts over
 * (dropping the old data). A slow answer never overwrites a newer one.
 */
export function usePoll<T>(key: string, load: () => Promise<T>, intervalMs = POLL_MS): Polled<T> {
  const [state, setState] = useState<{ key: string; data: T | undefined; error: Error | undefined }>({
    key,
    data: undefined,
    error: undefined,
  });
  const seq = useRef(0);
  const loadRef = useRef(load);
  loadRef.current = load;

  const run = useCallback(() => {
    const mine = ++seq.current;
    loadRef.current().then(
      (data) => {
        if (mine === seq.current) setState({ key, data, error: undefined });
      },
      (error: unknown) => {
        if (mine === seq.current)
          setState((s) => ({
            key,
            data: s.key === key ? s.data : undefined,
            error: error instanceof Error ? error : new Error(String(error)),
          }));
      },
    );
  }, [key]);

  useEffect(() => {
    run();
    const timer = setInterval(() => {
      if (document.visibilityState === 'visible') run();
    }, intervalMs);
    return () => {
      clearInterval(timer);
      seq.current++;
    };
  }, [run, intervalMs]);

  const current = state.key === key;
  return { data: current ? state.data : undefined, error: current ? state.error : undefined, reload: run };
}
