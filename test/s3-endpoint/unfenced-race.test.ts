import { request as httpRequest } from "node:http";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startTestGateway, type TestGateway } from "../support/gateway.js";
import { objectPath, parseS3Error, signedRequest, signRequest } from "../support/signed-http.js";
import { sleep } from "../support/wait.js";

/**
 * Policy `optional`, over HTTP: an unfenced PUT that began before a lease on its key was granted
 * and commits after it (its body was slow) is refused with FencingTokenRequired, atomically with
 * the commit, so the lease holder's read-modify-write loses nothing.
 */

let gw: TestGateway;
const bucket = "optional";
const key = "counter.txt";

beforeAll(async () => {
  gw = await startTestGateway({ env: { FENCEGATE_FENCING: "optional" } });
  expect((await signedRequest(gw.url, { method: "PUT", path: `/${bucket}` })).status).toBe(200);
});

afterAll(async () => {
  await gw?.stop();
});

const read = async (name = key) =>
  (await signedRequest(gw.url, { method: "GET", path: objectPath(bucket, name) })).text;

/** A PUT without a token whose body arrives in two halves; `between` runs after the first. */
async function slowUnfencedPut(body: string, between: () => Promise<void>, name = key) {
  const signed = await signRequest(gw.url, {
    method: "PUT",
    path: objectPath(bucket, name),
    payloadHash: "UNSIGNED-PAYLOAD",
    headers: { "content-length": String(Buffer.byteLength(body)) },
  });
  const url = new URL(gw.url);
  const answer = new Promise<{ status: number; text: string }>((resolve, reject) => {
    const req = httpRequest(
      {
        host: url.hostname,
        port: Number(url.port),
        method: "PUT",
        path: signed.path,
        headers: signed.headers,
      },
      (res) => {
        let text = "";
        res.on("data", (d) => {
          text += d;
        });
        res.on("end", () => resolve({ status: res.statusCode ?? 0, text }));
      },
    );
    req.on("error", reject);
    req.write(body.slice(0, body.length / 2));
    // The gateway has the request and is reading its body when `between` runs.
    sleep(300)
      .then(between)
      .then(() => req.end(body.slice(body.length / 2)), reject);
  });
  return answer;
}

describe("an unfenced write across a grant (policy optional)", () => {
  it("is refused when a lease covering its key was granted while its body arrived", async () => {
    expect(
      (await signedRequest(gw.url, { method: "PUT", path: objectPath(bucket, key), body: "1" })).status,
    ).toBe(200);
    let holder: Awaited<ReturnType<typeof gw.leases.acquire>> | undefined;
    let seenByHolder = "";
    const res = await slowUnfencedPut("unfenced write", async () => {
      holder = await gw.leases.acquire({ bucket, key, ttlMs: 60_000, owner: "holder" });
      seenByHolder = await read();
    });
    expect(res.status, res.text).toBe(428);
    expect(parseS3Error(res.text).Code).toBe("FencingTokenRequired");
    expect(seenByHolder).toBe("1");
    expect(await read()).toBe("1");

    // The holder's read-modify-write lands on what it read.
    const next = String(Number(seenByHolder) + 1);
    const put = await signedRequest(gw.url, {
      method: "PUT",
      path: objectPath(bucket, key),
      body: next,
      headers: { "x-fence-token": holder!.fencingToken },
    });
    expect(put.status, put.text).toBe(200);
    expect(await read()).toBe("2");
    const records = (await gw.leases.audit({ bucket, key, decision: "rejected" })).records as Array<
      Record<string, unknown>
    >;
    expect(records.map((r) => [r.op, r.reason])).toEqual([["PutObject", "FencingTokenRequired"]]);
    await gw.leases.release(holder!.leaseId);
  });

  it("commits when no lease was granted meanwhile", async () => {
    const res = await slowUnfencedPut("3", async () => undefined, "other.txt");
    expect(res.status, res.text).toBe(200);
    expect(await read("other.txt")).toBe("3");
  });
});
