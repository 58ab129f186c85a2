import { RestError } from "@azure/storage-blob";
import { describe, expect, it } from "vitest";
import { AzureCalls } from "../../../src/backends/azure/azure-calls.js";
import { isLostRace, toDomainError } from "../../../src/backends/azure/azure-errors.js";

/** Azure's failures as S3 errors: what a client is told, never a hang. */

const restError = (statusCode: number, code: string | undefined, headers: Record<string, string> = {}) => {
  const error = new RestError(`${code ?? statusCode} from Azure\nRequestId:x`, {
    statusCode,
    ...(code ? { code } : {}),
    response: {
      status: statusCode,
      headers: { get: (name: string) => headers[name.toLowerCase()] } as never,
      request: {} as never,
    },
  });
  return error;
};

const mapped = (e: unknown) => toDomainError(e, { what: "put blob b/k", timeoutMs: 1000 });

describe("azure errors", () => {
  it("maps throttling to SlowDown with retryAfterSeconds", () => {
    expect(mapped(restError(503, "ServerBusy", { "retry-after": "7" }))).toMatchObject({
      code: "SlowDown",
      details: { retryAfterSeconds: 7 },
    });
    expect(mapped(restError(429, undefined))).toMatchObject({
      code: "SlowDown",
      details: { retryAfterSeconds: 1 },
    });
  });

  it("maps server failures and network errors to ServiceUnavailable", () => {
    expect(mapped(restError(500, "OperationTimedOut"))).toMatchObject({ code: "ServiceUnavailable" });
    expect(mapped(restError(503, "ServiceUnavailable"))).toMatchObject({ code: "ServiceUnavailable" });
    const refused = Object.assign(new Error("connect ECONNREFUSED 127.0.0.1:1"), { code: "ECONNREFUSED" });
    expect(mapped(refused)).toMatchObject({
      code: "ServiceUnavailable",
      message: expect.stringMatching(/unreachable/),
    });
  });

  it("maps container, lease, block list, metadata and credential errors", () => {
    expect(mapped(restError(404, "ContainerNotFound"))).toMatchObject({ code: "NoSuchBucket" });
    expect(mapped(restError(412, "LeaseIdMissing"))).toMatchObject({
      code: "ServiceUnavailable",
      message: expect.stringMatching(/Azure lease/),
    });
    expect(mapped(restError(400, "InvalidBlockList"))).toMatchObject({ code: "SlowDown" });
    expect(mapped(restError(409, "BlobOperationNotSupported"))).toMatchObject({
      code: "InvalidRequest",
      message: expect.stringMatching(/dfs/),
    });
    expect(mapped(restError(400, "MetadataTooLarge"))).toMatchObject({ code: "MetadataTooLarge" });
    expect(mapped(restError(403, "AuthenticationFailed"))).toMatchObject({ code: "InternalError" });
  });

  it("tells a lost compare-and-swap from a lease conflict", () => {
    expect(isLostRace(restError(412, "ConditionNotMet"))).toBe(true);
    expect(isLostRace(restError(409, "BlobAlreadyExists"))).toBe(true);
    expect(isLostRace(restError(412, "LeaseIdMissing"))).toBe(false);
  });

  it("ends every call at its deadline and when the caller's signal aborts", async () => {
    const calls = new AzureCalls(50);
    const never = (signal: AbortSignal) =>
      new Promise<never>((_, reject) => signal.addEventListener("abort", () => reject(new Error("aborted"))));
    await expect(calls.run("list things", undefined, never)).rejects.toMatchObject({
      code: "ServiceUnavailable",
      message: expect.stringMatching(/within 50 ms \(list things\)/),
    });
    const controller = new AbortController();
    const pending = calls.run("read things", controller.signal, never);
    controller.abort();
    await expect(pending).rejects.toMatchObject({ code: "IncompleteBody" });
    await expect(calls.run("late", controller.signal, never)).rejects.toMatchObject({
      code: "IncompleteBody",
    });
  });
});
