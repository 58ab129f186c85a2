import { describe, expect, it } from "vitest";
import { assertUploadFence } from "../../src/fence/multipart-rules.js";

describe("assertUploadFence: parts and completions carry their upload's own lease", () => {
  const bound = { uploadId: "u1", token: 5 };
  const unbound = { uploadId: "u2", token: null };
  const code = (fn: () => void) => {
    try {
      fn();
      return null;
    } catch (e) {
      return (e as { code?: string }).code;
    }
  };

  it("accepts the upload's own token, and no token for an unfenced upload", () => {
    expect(code(() => assertUploadFence(bound, { token: 5 }))).toBeNull();
    expect(code(() => assertUploadFence(unbound, null))).toBeNull();
  });

  it("refuses another lease's token, newer or older, with FencingTokenScopeMismatch", () => {
    expect(code(() => assertUploadFence(bound, { token: 6 }))).toBe("FencingTokenScopeMismatch");
    expect(code(() => assertUploadFence(bound, { token: 4 }))).toBe("FencingTokenScopeMismatch");
  });

  it("refuses a missing token on a fenced upload with FencingTokenRequired", () => {
    expect(code(() => assertUploadFence(bound, null))).toBe("FencingTokenRequired");
    expect(code(() => assertUploadFence(bound, { ceiling: 9 }))).toBe("FencingTokenRequired");
  });

  it("refuses a token on an unfenced upload with FencingTokenScopeMismatch", () => {
    expect(code(() => assertUploadFence(unbound, { token: 5 }))).toBe("FencingTokenScopeMismatch");
  });
});
