import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { Database } from "../../src/sqlite/sqlite.js";
import { CREDENTIALS, startTestGateway, type TestGateway } from "../support/gateway.js";
import { expectS3Error, objectPath, type RawResponse, signedRequest } from "../support/signed-http.js";

/**
 * Every decision is recorded before it is answered, and a decision the audit log fails to take
 * is answered 503 and leaves no trace: no upload, no part, no object. The failure is real: the
 * embedded audit log's INSERT fails (as on a full disk) for the records a test chooses, in both
 * arrangements the fencing core has:
 * - "fs backend": the log shares the backend's database, its record joins the commit's step;
 * - "S3 backend": the objects live in another store (a second gateway), and the record is
 *   appended after the commit. An upload it could not record is removed again; a part or an
 *   object stays committed, answered 503 (docs/s3.md, "Audit of S3 requests"): a retry
 *   replaces it.
 */

type Draft = { op: string; decision: string; gateway: string };
type StatementProto = { run(this: { source: string }, ...args: unknown[]): unknown };

// The prototype of every better-sqlite3 statement: the gateways run in this process.
const probe = new Database(":memory:");
const proto = Object.getPrototypeOf(probe.prepare("SELECT 1")) as StatementProto;
probe.close();
const originalRun = proto.run;
/**
 * The record an INSERT writes, from its positional parameters (time, time_ms, op, bucket, key,
 * prefix, token, lease_id, owner, principal, decision, reason, highest_token, request_id,
 * gateway: src/audit/embedded/embedded-audit-log.ts).
 */
const draftOf = (args: unknown[]): Draft => ({
  op: args[2] as string,
  decision: args[10] as string,
  gateway: args[14] as string,
});
/** Which audit records fail to be written; null: none. */
let failing: ((draft: Draft) => boolean) | null = null;
proto.run = function run(this: { source: string }, ...args: unknown[]) {
  if (failing && this.source.startsWith("INSERT INTO audit_records") && failing(draftOf(args))) {
    throw new Error("database or disk is full");
  }
  return originalRun.apply(this, args);
};

afterAll(() => {
  proto.run = originalRun;
});
afterEach(() => {
  failing = null;
});

const bucket = "audited";
const list = (res: RawResponse, tag: string) =>
  [...res.text.matchAll(new RegExp(`<${tag}>([^<]*)</${tag}>`, "g"))].map((m) => m[1]!);

for (const arrangement of ["fs backend", "S3 backend"] as const) {
  describe(`a decision the audit log cannot take is answered 503 and leaves no trace (${arrangement})`, () => {
    let gw: TestGateway;
    let store: TestGateway | undefined;
    let token: string;
    /** Whether the log's record joins the commit's step, so that a failed record undoes the commit. */
    const joined = arrangement === "fs backend";

    beforeAll(async () => {
      if (arrangement === "S3 backend") {
        store = await startTestGateway({ env: { FENCEGATE_FENCING: "optional" } });
        gw = await startTestGateway({
          env: {
            FENCEGATE_BACKEND: "s3",
            FENCEGATE_S3_ENDPOINT: store.url,
            FENCEGATE_S3_REGION: "us-east-1",
            FENCEGATE_S3_ACCESS_KEY_ID: CREDENTIALS.accessKeyId,
            FENCEGATE_S3_SECRET_ACCESS_KEY: CREDENTIALS.secretAccessKey,
            FENCEGATE_S3_FORCE_PATH_STYLE: "true",
          },
        });
      } else {
        gw = await startTestGateway();
      }
      expect((await signedRequest(gw.url, { method: "PUT", path: `/${bucket}` })).status).toBe(200);
      const lease = await gw.leases.acquire({ bucket, prefix: "", ttlMs: 600_000, owner: "audit-test" });
      token = lease.fencingToken;
    });

    afterAll(async () => {
      await gw?.stop();
      await store?.stop();
    });

    /** Fails this gateway's records of `op` with the given decision (the store's are its own). */
    const failRecords = (op: string, decision: "accepted" | "rejected" | "any") => {
      failing = (d) =>
        d.gateway === gw.gatewayId && d.op === op && (decision === "any" || d.decision === decision);
    };
    const send = (req: Parameters<typeof signedRequest>[1]) =>
      signedRequest(gw.url, { ...req, headers: { "x-fence-token": token, ...req.headers } });
    const uploads = async () =>
      list(
        await signedRequest(gw.url, { method: "GET", path: `/${bucket}`, query: { uploads: "" } }),
        "UploadId",
      );
    const audited = async (op: string) =>
      ((await gw.leases.audit({ bucket, op, limit: "1000" })).records as Array<Record<string, unknown>>).map(
        (r) => [r.key, r.decision, r.reason],
      );
    const createUpload = async (key: string) => {
      const res = await send({ method: "POST", path: objectPath(bucket, key), query: { uploads: "" } });
      expect(res.status, res.text).toBe(200);
      return list(res, "UploadId")[0]!;
    };

    it("CreateMultipartUpload: 503, and no upload exists", async () => {
      const before = await uploads();
      failRecords("CreateMultipartUpload", "accepted");
      const res = await send({
        method: "POST",
        path: objectPath(bucket, "mp/create"),
        query: { uploads: "" },
      });
      failing = null;
      expectS3Error(res, "ServiceUnavailable", 503);
      expect(await uploads()).toEqual(before);
      // The log holds the truth: no accepted decision; the refusal it could record.
      const records = (await audited("CreateMultipartUpload")).filter((r) => r[0] === "mp/create");
      expect(records).toEqual(joined ? [["mp/create", "rejected", "ServiceUnavailable"]] : []);
    });

    it("UploadPart: 503, and the upload holds no part", async () => {
      const uploadId = await createUpload("mp/part");
      failRecords("UploadPart", "accepted");
      const res = await send({
        method: "PUT",
        path: objectPath(bucket, "mp/part"),
        query: { uploadId, partNumber: "1" },
        body: "part body",
      });
      failing = null;
      expectS3Error(res, "ServiceUnavailable", 503);
      const parts = await signedRequest(gw.url, {
        method: "GET",
        path: objectPath(bucket, "mp/part"),
        query: { uploadId },
      });
      expect(parts.status, parts.text).toBe(200);
      if (joined) expect(list(parts, "PartNumber")).toEqual([]);
      const records = await audited("UploadPart");
      expect(records).not.toContainEqual(["mp/part", "accepted", null]);
      if (joined) expect(records).toEqual([["mp/part", "rejected", "ServiceUnavailable"]]);
    });

    it("PutObject: 503, and no object exists", async () => {
      failRecords("PutObject", "accepted");
      const res = await send({ method: "PUT", path: objectPath(bucket, "obj/put"), body: "data" });
      failing = null;
      expectS3Error(res, "ServiceUnavailable", 503);
      expect(await audited("PutObject")).not.toContainEqual(["obj/put", "accepted", null]);
      const head = await signedRequest(gw.url, { method: "HEAD", path: objectPath(bucket, "obj/put") });
      if (joined) expect(head.status).toBe(404);
    });

    it("a refusal by the fencing core whose record fails: 503, never the refusal", async () => {
      failRecords("PutObject", "rejected");
      const res = await signedRequest(gw.url, {
        method: "PUT",
        path: objectPath(bucket, "obj/no-token"),
        body: "x",
      });
      failing = null;
      expectS3Error(res, "ServiceUnavailable", 503);
      expect(await audited("PutObject")).not.toContainEqual([
        "obj/no-token",
        "rejected",
        "FencingTokenRequired",
      ]);
    });

    it("a refusal before the fencing decision (bad signature, AccessDenied) whose record fails: 503", async () => {
      failRecords("PutObject", "any");
      const res = await signedRequest(gw.url, {
        method: "PUT",
        path: objectPath(bucket, "obj/bad-signature"),
        body: "x",
        credentials: { accessKeyId: CREDENTIALS.accessKeyId, secretAccessKey: "not-the-secret" },
      });
      failing = null;
      expectS3Error(res, "ServiceUnavailable", 503);
      // With the log back, the same refusal is recorded and answered as itself.
      const again = await signedRequest(gw.url, {
        method: "PUT",
        path: objectPath(bucket, "obj/bad-signature"),
        body: "x",
        credentials: { accessKeyId: CREDENTIALS.accessKeyId, secretAccessKey: "not-the-secret" },
      });
      expectS3Error(again, "SignatureDoesNotMatch", 403);
      expect(await audited("PutObject")).toContainEqual([
        "obj/bad-signature",
        "rejected",
        "SignatureDoesNotMatch",
      ]);
    });

    it("with the log back, the same writes are accepted and recorded", async () => {
      const uploadId = await createUpload("mp/after");
      const part = await send({
        method: "PUT",
        path: objectPath(bucket, "mp/after"),
        query: { uploadId, partNumber: "1" },
        body: "part body",
      });
      expect(part.status, part.text).toBe(200);
      expect(await audited("UploadPart")).toContainEqual(["mp/after", "accepted", null]);
      expect(await audited("CreateMultipartUpload")).toContainEqual(["mp/after", "accepted", null]);
    });
  });
}
