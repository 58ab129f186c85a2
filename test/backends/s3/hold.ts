import type { S3CommitHooks, S3CommitStep } from "../../../src/backends/s3/index.js";

/**
 * Holds commits at one hook step until released: `hold(key, step)` arms it for the next commit
 * of `key` that reaches `step` on its first pass; `reached` resolves when it is there.
 */
export function holdingHooks() {
  const armed = new Map<string, { step: S3CommitStep; reached: () => void; released: Promise<void> }>();
  const hooks: S3CommitHooks = async (step, info) => {
    const hold = armed.get(info.key);
    if (!hold || hold.step !== step || info.attempt > 1) return;
    armed.delete(info.key);
    hold.reached();
    await hold.released;
  };
  const hold = (key: string, step: S3CommitStep) => {
    let reached!: () => void;
    let release!: () => void;
    const isReached = new Promise<void>((r) => {
      reached = r;
    });
    const released = new Promise<void>((r) => {
      release = r;
    });
    armed.set(key, { step, reached, released });
    return { reached: isReached, release };
  };
  return { hooks, hold };
}
