import { describe, expect, it } from "vitest";
import { apiError, LeaseLostError } from "../../src/client/errors.js";

// A renewal refused with 409 LeaseLost says why in `reason` (src/leases/lease-rules.ts
// lostByRelease): the SDK's LeaseLostError keeps "broken" and "released" apart from the answer
// alone, for callers who may not read the audit log.
const refusal = (reason: string, message: string) =>
  apiError({
    status: 409,
    code: "LeaseLost",
    message,
    body: { error: { code: "LeaseLost", message, reason } },
  });

describe("LeaseLostError.reason from the gateway's answer", () => {
  it("tells broken, released and expired apart", () => {
    const broken = refusal("broken", "lease L1 was broken by an administrator");
    expect(broken).toBeInstanceOf(LeaseLostError);
    expect((broken as LeaseLostError).reason).toBe("broken");
    expect((refusal("released", "lease L1 was released") as LeaseLostError).reason).toBe("released");
    expect((refusal("expired", "lease L1 expired at …") as LeaseLostError).reason).toBe("expired");
  });
});
