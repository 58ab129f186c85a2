/**
 * The request line skips pino's redaction (its cost was most of a line's); what keeps secrets
 * out of it is that it writes only the fields it names. Secret-bearing fields put on a request's
 * summary by mistake never reach the log, and every other line is still redacted.
 */
import { Writable } from "node:stream";
import { describe, expect, it } from "vitest";
import { createLogger, flushLogger, logRequestLine, type RequestSummary } from "../../src/core/log.js";

const SECRETS = {
  secret: "s3cr3t-value-1",
  secretAccessKey: "s3cr3t-value-2",
  authorization: "AWS4-HMAC-SHA256 Credential=AKIA/..., Signature=s3cr3t-value-3",
  headers: { authorization: "s3cr3t-value-4", "x-fence-token": "s3cr3t-value-5" },
  fencingToken: "s3cr3t-value-6",
  tokenString: "s3cr3t-value-7",
};

function sink(): { lines: string[]; stream: Writable } {
  const lines: string[] = [];
  const stream = new Writable({
    write(chunk, _enc, done) {
      lines.push(...String(chunk).split("\n").filter(Boolean));
      done();
    },
  });
  return { lines, stream };
}

describe("the request line", () => {
  it("writes its named fields and never a secret-bearing field, even one put on the summary", async () => {
    const { lines, stream } = sink();
    const log = createLogger("info", { gateway: "gw-1" }, stream);
    const summary = {
      principal: "AKIDEXAMPLE",
      operation: "PutObject",
      bucket: "bkt",
      key: "obj",
      token: 42,
      decision: "accepted",
      ...SECRETS,
    } as unknown as RequestSummary;
    logRequestLine(log, {
      requestId: "R1",
      method: "PUT",
      path: "/bkt/obj",
      status: 200,
      durationMs: 1.5,
      summary,
    });
    // A token that is not a number (a signed token string by mistake) is left out too.
    const stringToken = { token: "s3cr3t-value-8" } as unknown as RequestSummary;
    logRequestLine(log, {
      requestId: "R2",
      method: "GET",
      path: "/",
      status: 200,
      durationMs: 1,
      summary: stringToken,
    });
    await flushLogger(log);
    expect(lines).toHaveLength(2);
    const text = lines.join("\n");
    expect(text).not.toMatch(/s3cr3t/);
    const first = JSON.parse(lines[0]!) as Record<string, unknown>;
    expect(first).toMatchObject({
      msg: "request",
      level: 30,
      gateway: "gw-1",
      requestId: "R1",
      method: "PUT",
      path: "/bkt/obj",
      status: 200,
      principal: "AKIDEXAMPLE",
      operation: "PutObject",
      bucket: "bkt",
      key: "obj",
      token: 42,
      decision: "accepted",
      durationMs: 1.5,
    });
    expect(Object.keys(first)).not.toContain("headers");
    expect(JSON.parse(lines[1]!)).not.toHaveProperty("token");
  });

  it("follows the logger's level, and every other line is still redacted", async () => {
    const { lines, stream } = sink();
    const log = createLogger("warn", {}, stream);
    logRequestLine(log, {
      requestId: "R0",
      method: "GET",
      path: "/",
      status: 200,
      durationMs: 1,
      summary: {},
    });
    log.level = "info";
    logRequestLine(log, {
      requestId: "R1",
      method: "GET",
      path: "/",
      status: 200,
      durationMs: 1,
      summary: {},
    });
    log.info({ ...SECRETS, req: { headers: { authorization: "s3cr3t-value-9" } } }, "other");
    log.child({ component: "x" }).warn({ secret: "s3cr3t-value-10" }, "child");
    // A child logger's request line goes through the child, redaction included.
    logRequestLine(log.child({ component: "y" }), {
      requestId: "R2",
      method: "GET",
      path: "/",
      status: 200,
      durationMs: 1,
      summary: SECRETS as unknown as RequestSummary,
    });
    await flushLogger(log);
    expect(lines.map((l) => (JSON.parse(l) as { requestId?: string; msg: string }).requestId ?? "-")).toEqual(
      ["R1", "-", "-", "R2"],
    );
    expect(lines.join("\n")).not.toMatch(/s3cr3t/);
    expect(lines[1]).toContain("[redacted]");
  });
});
