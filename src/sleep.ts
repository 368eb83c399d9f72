/**
 * The project's one delay. It does not keep the process alive on its own;
 * `{ keepAlive: true }` for a pause that must (a retry a short-lived command
 * is waiting on, with nothing else holding the event loop open).
 */
export function sleep(ms: number, opts?: { keepAlive?: boolean }): Promise<void> {
  return new Promise((resolve) => {
    const timer = setTimeout(resolve, ms);
    if (opts?.keepAlive !== true) timer.unref();
  });
}
