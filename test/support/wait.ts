/** Timing helpers shared by the suites: the one `sleep`, and polling with a deadline. */

export const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

/**
 * Polls `probe` every `intervalMs` until it returns something other than undefined, null or
 * false, and resolves with that. After `timeoutMs` it rejects with `timed out waiting for
 * <what>`, followed by `details()` (e.g. a child process's output) when given. A probe that
 * throws ends the wait at once with its error.
 */
export async function waitFor<T>(
  probe: () => T | undefined | null | false | Promise<T | undefined | null | false>,
  opts: { what: string; timeoutMs?: number; intervalMs?: number; details?: () => string },
): Promise<T> {
  const deadline = Date.now() + (opts.timeoutMs ?? 20_000);
  for (;;) {
    const value = await probe();
    if (value !== undefined && value !== null && value !== false) return value;
    if (Date.now() > deadline) {
      const details = opts.details?.();
      throw new Error(`timed out waiting for ${opts.what}${details ? `:\n${details}` : ""}`);
    }
    await sleep(opts.intervalMs ?? 50);
  }
}
