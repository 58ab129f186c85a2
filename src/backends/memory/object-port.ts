import type { MemoryDomain } from "../../core/tx.js";
import type { FenceState, NextState, ObjectRef, StepPort, StepResult } from "../../fence/commit-port.js";
import type { MemoryObjects, MemoryVersion } from "./memory-objects.js";

/**
 * The memory backend as the commit driver sees it (src/fence/commit-port.ts): a step backend
 * whose step is one synchronous stretch of the process, taken back on a throw (MemoryDomain).
 */
export class MemoryObjectPort implements StepPort<MemoryVersion> {
  readonly kind = "step";

  constructor(
    readonly domain: MemoryDomain,
    private readonly objects: MemoryObjects,
  ) {}

  step(
    ref: ObjectRef,
    write: boolean,
    decide: (state: FenceState) => NextState<MemoryVersion> | null,
  ): StepResult {
    const { record, state } = this.objects.stateOf(ref.bucket, ref.key, write);
    const next = decide(state);
    if (next === null) return { state, wrote: false };
    if (next.kind === "put") next.version.inStep?.();
    this.objects.apply(ref.bucket, ref.key, record, next);
    return { state, wrote: true };
  }

  async discard(): Promise<void> {
    // The bytes are in the version itself: nothing was stored.
  }
}
