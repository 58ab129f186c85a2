/**
 * How the lease API reads a request body (src/api/request-auth.ts): sent in pieces with
 * Transfer-Encoding: chunked it is put back together whole; past 64 KiB without a Content-Length
 * it is refused and the gateway keeps serving; a client that hangs up half-way through its body
 * is granted nothing.
 */
import { createHash } from "node:crypto";
import { request } from "node:http";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { CREDENTIALS, startTestGateway, type TestGateway } from "../support/gateway.js";
import { rawRequest, signedRequest, signRequest } from "../support/signed-http.js";
import { apiAs, apiCall } from "./lease-calls.js";

let gw: TestGateway;
const api = () => apiAs(gw.url, CREDENTIALS);
const BUCKET = "body";

beforeAll(async () => {
  gw = await startTestGateway();
  expect((await signedRequest(gw.url, { method: "PUT", path: `/${BUCKET}` })).status).toBe(200);
});

afterAll(async () => {
  await gw?.stop();
});

type Sent = { status: number; text: string } | { error: string };

/** POST /_fence/v1/leases with `pieces` sent one by one, chunked; `hangUp` ends the socket instead of the body. */
async function postInPieces(pieces: Buffer[], opts: { hangUp?: boolean } = {}): Promise<Sent> {
  const whole = Buffer.concat(pieces);
  const signed = await signRequest(gw.url, {
    method: "POST",
    path: "/_fence/v1/leases",
    headers: { "content-type": "application/json", "transfer-encoding": "chunked" },
    payloadHash: createHash("sha256").update(whole).digest("hex"),
  });
  const url = new URL(gw.url);
  return new Promise<Sent>((resolve) => {
    const req = request(
      {
        host: url.hostname,
        port: Number(url.port),
        method: "POST",
        path: signed.path,
        headers: signed.headers,
        agent: false,
      },
      (res) => {
        const chunks: Buffer[] = [];
        res.on("data", (c: Buffer) => chunks.push(c));
        res.on("end", () => resolve({ status: res.statusCode ?? 0, text: Buffer.concat(chunks).toString() }));
        res.on("error", (e) => resolve({ error: e.message }));
      },
    );
    req.on("error", (e) => resolve({ error: e.message }));
    (async () => {
      for (const piece of pieces) {
        req.write(piece);
        await new Promise((r) => setTimeout(r, 20));
      }
      if (opts.hangUp) {
        req.destroy();
        resolve({ error: "hung up" });
      } else req.end();
    })();
  });
}

describe("lease API request bodies", () => {
  it("a chunked body sent in pieces is read whole", async () => {
    const json = Buffer.from(
      JSON.stringify({ bucket: BUCKET, key: "pieces", ttlMs: 30_000, owner: "in-pieces" }),
    );
    const sent = await postInPieces([json.subarray(0, 7), json.subarray(7, 20), json.subarray(20)]);
    expect(sent).toMatchObject({ status: 201 });
    const lease = JSON.parse((sent as { text: string }).text);
    expect(lease).toMatchObject({ bucket: BUCKET, key: "pieces", owner: "in-pieces" });
    expect((await api().release(lease.leaseId)).status).toBe(204);
  });

  it("a chunked body past 64 KiB is refused, and the gateway keeps serving", async () => {
    const filler = Buffer.alloc(16 * 1024, 0x20);
    const head = Buffer.from(`{"bucket":"${BUCKET}","key":"huge","ttlMs":30000,"owner":"`);
    const sent = await postInPieces([head, filler, filler, filler, filler, filler, Buffer.from('"}')]);
    // Refused with the API's 400, or cut off mid-body: never granted.
    if ("status" in sent) {
      expect(sent.status).toBe(400);
      expect(sent.text).toContain("exceeds");
    }
    const after = await api().acquire({ bucket: BUCKET, key: "huge", ttlMs: 1_000 });
    expect(after.status).toBe(201);
    expect(after.body.owner).not.toMatch(/^ +$/);
    await api().release(after.body.leaseId);
  });

  it("a signed header sent twice verifies: its canonical value joins the two with a bare comma", async () => {
    const body = JSON.stringify({ bucket: BUCKET, key: "twice", ttlMs: 30_000, owner: "twice" });
    const signed = await signRequest(gw.url, {
      method: "POST",
      path: "/_fence/v1/leases",
      body,
      headers: { "content-type": "application/json", "x-amz-meta-note": "a,b" },
    });
    const headers: Record<string, string | string[]> = { ...signed.headers, "x-amz-meta-note": ["a", "b"] };
    const sent = await rawRequest(gw.url, { ...signed, headers });
    expect({ status: sent.status, body: sent.text.slice(0, 300) }).toMatchObject({ status: 201 });
    expect((await api().release(JSON.parse(sent.text).leaseId)).status).toBe(204);
  });

  it("a call that takes no fields refuses a body that is not a JSON object, and does nothing", async () => {
    const lease = (await api().acquire({ bucket: BUCKET, key: "no-fields", ttlMs: 30_000 })).body;
    const paths = [
      `/_fence/v1/leases/${lease.leaseId}/delegates`,
      `/_fence/v1/leases/${lease.leaseId}/break`,
      `/_fence/v1/leases/${lease.leaseId}/transactions`,
      "/_fence/v1/transactions/none/commit",
    ];
    for (const path of paths) {
      for (const body of ["{bad", "[1]", '"text"']) {
        const res = await signedRequest(gw.url, {
          method: "POST",
          path,
          body,
          headers: { "content-type": "application/json" },
        });
        expect({ path, body, status: res.status, code: JSON.parse(res.text).error?.code }).toEqual({
          path,
          body,
          status: 400,
          code: "InvalidRequest",
        });
      }
    }
    const delegates = await apiCall(gw.url, CREDENTIALS, "GET", `/leases/${lease.leaseId}/delegates`);
    expect(delegates.body.delegates).toEqual([]);
    expect((await api().get(lease.leaseId)).status).toBe(200);
    expect((await api().release(lease.leaseId)).status).toBe(204);
  });

  it("a client that hangs up half-way through its body is granted nothing", async () => {
    const json = Buffer.from(JSON.stringify({ bucket: BUCKET, key: "half", ttlMs: 30_000, owner: "gone" }));
    expect(await postInPieces([json.subarray(0, 10)], { hangUp: true })).toEqual({ error: "hung up" });
    // Give the gateway time to see the hang-up, then the key must be free and never leased.
    await new Promise((r) => setTimeout(r, 200));
    const listed = await api().list({ bucket: BUCKET, prefix: "half" });
    expect(listed.body.leases).toEqual([]);
    const other = await api().acquire({ bucket: BUCKET, key: "half", ttlMs: 1_000 });
    expect(other.status).toBe(201);
    await api().release(other.body.leaseId);
  });
});
