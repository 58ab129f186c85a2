import type { Clock } from "../../core/clock.js";
import type { FenceState, NextState, ObjectRef, StepPort, StepResult } from "../../fence/commit-port.js";
import type { EmbeddedDomain } from "../../sqlite/db.js";
import type { BlobStore } from "./blob-store.js";
import type { FsMetadataStore, FsVersion } from "./metadata-store.js";

/**
 * The fs backend as the commit driver sees it (src/fence/commit-port.ts): a step backend. One
 * transaction of the embedded database reads the object's row, lets the driver decide (the HCT
 * rule, the conditions, and the lease check and the audit record when they share the database),
 * and changes the row; the blob file it replaced is unlinked after the transaction.
 */
export class FsObjectPort implements StepPort<FsVersion> {
  readonly kind = "step";

  constructor(
    readonly domain: EmbeddedDomain,
    private readonly rows: FsMetadataStore,
    private readonly blobs: BlobStore,
    private readonly clock: Clock,
  ) {}

  step(
    ref: ObjectRef,
    write: boolean,
    decide: (state: FenceState) => NextState<FsVersion> | null,
  ): StepResult {
    const { row, state } = this.rows.stateOf(ref.bucket, ref.key, write);
    const next = decide(state);
    if (next === null) return { state, wrote: false };
    if (next.kind === "put") next.version.inStep?.();
    const replaced = this.rows.apply(ref.bucket, ref.key, row, next, this.clock());
    return {
      state,
      wrote: true,
      ...(replaced !== null && (next.kind !== "put" || next.version.body.blob !== replaced)
        ? { cleanup: () => this.blobs.remove(replaced) }
        : {}),
    };
  }

  async discard(_ref: ObjectRef, version: FsVersion): Promise<void> {
    if (version.body.blob !== undefined) await this.blobs.remove(version.body.blob);
  }
}
