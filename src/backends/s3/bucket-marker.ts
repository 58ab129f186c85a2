import type { BucketPhase } from "../../fence/commit-port.js";

/**
 * A bucket's marker `<m>deleted` (layout.ts): absent for a live bucket; JSON {phase, since,
 * nonce} once a deletion touched it (the nonce makes its store ETag unique, so that it is
 * replaced by compare-and-swap); the bare {deleted} that older versions wrote means deleted.
 */
/** The marker's phase; the bare {deleted} of older versions means deleted. */
export function parseMarker(text: string): { phase: BucketPhase; since: number } {
  try {
    const value = JSON.parse(text) as { phase?: unknown; since?: unknown };
    if (value.phase === "live" || value.phase === "deleting" || value.phase === "deleted") {
      return { phase: value.phase, since: typeof value.since === "number" ? value.since : 0 };
    }
  } catch {
    // Not ours: treated as deleted, as older versions wrote any marker there.
  }
  return { phase: "deleted", since: 0 };
}
