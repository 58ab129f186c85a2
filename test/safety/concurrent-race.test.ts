// Safety scenario 3 under heavy concurrency: writers with interleaved tokens on several objects
// at once, lease hand-overs while writes are in flight, and grants that fail inside their own
// step after they wrote (an injected failure of the grant's audit insert, as a full disk would
// make it), all committed by the embedded store in shared batches (group commit). Per object the
// HCT never decreases and the object is an accepted write with the highest accepted token; a
// grant that failed inside a batch leaves no lease and does not disturb the others of its batch.

import { CreateBucketCommand, GetObjectCommand, PutObjectCommand, type S3Client } from "@aws-sdk/client-s3";
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { type Lease, LeaseApiError } from "../../src/client/lease-client.js";
import { EmbeddedDomain } from "../../src/sqlite/db.js";
import { Database } from "../../src/sqlite/sqlite.js";
import { md5Hex } from "../support/digest.js";
import { startTestGateway, type TestGateway } from "../support/gateway.js";
import { allAuditRecords, outcomeOfError, quietLogger } from "../support/safety-helpers.js";

const BUCKET = "crowd";
const KEYS = 6;
const ROUNDS = 6;
const CURRENT_PER_ROUND = 4;
const OLD_PER_ROUND = 3;
const CLIENTS = 12;
/** Grants per round, on keys of their own, whose audit insert fails inside the batch. */
const DOOMED_PER_ROUND = 3;

type Sent = {
  key: string;
  token: number;
  body: string;
  status: number;
  code: string | null;
  requestId: string;
};

describe("many writers and grants at once, committed in shared batches", () => {
  let gw: TestGateway;
  let clients: S3Client[];
  const domains = new Set<EmbeddedDomain>();
  const injected: string[] = [];

  beforeAll(async () => {
    // The gateway's domain, to see that its steps really were committed in shared batches.
    const run = EmbeddedDomain.prototype.run;
    vi.spyOn(EmbeddedDomain.prototype, "run").mockImplementation(function (this: EmbeddedDomain, step) {
      domains.add(this);
      return run.call(this, step) as never;
    });
    // The failure: the audit insert of a grant to an owner named "doomed-…" throws, after the
    // lease row was inserted and the token counter raised in the same step.
    const scratch = new Database(":memory:");
    const statement = Object.getPrototypeOf(scratch.prepare("SELECT 1")) as {
      run: (...args: unknown[]) => unknown;
    };
    scratch.close();
    const original = statement.run;
    vi.spyOn(statement, "run").mockImplementation(function (this: { source: string }, ...args: unknown[]) {
      if (/INSERT INTO audit_records/.test(this.source) && JSON.stringify(args).includes('"doomed-')) {
        injected.push(JSON.stringify(args));
        throw new Error("injected: the audit insert of this grant failed");
      }
      return original.apply(this, args);
    });
    gw = await startTestGateway();
    clients = Array.from({ length: CLIENTS }, () => gw.s3({ logger: quietLogger }));
    await clients[0]!.send(new CreateBucketCommand({ Bucket: BUCKET }));
  });

  afterAll(async () => {
    vi.restoreAllMocks();
    for (const c of clients ?? []) c.destroy();
    await gw?.stop();
  });

  it("keeps every object's HCT rising and takes back only the failed grants", {
    timeout: 120_000,
  }, async () => {
    let n = 0;
    const put = async (key: string, lease: Lease): Promise<Sent> => {
      const i = n++;
      const body = `${key} write ${i} token ${lease.token}\n${i % 5 === 0 ? "x".repeat(200 * 1024) : ""}`;
      const client = clients[i % CLIENTS]!;
      try {
        const out = await client.send(
          new PutObjectCommand({
            Bucket: BUCKET,
            Key: key,
            Body: body,
            Metadata: { "fence-token": lease.fencingToken },
          }),
        );
        expect(out.ETag).toBe(`"${md5Hex(body)}"`);
        return {
          key,
          token: lease.token,
          body,
          status: 200,
          code: null,
          requestId: out.$metadata.requestId!,
        };
      } catch (err) {
        const o = outcomeOfError(err);
        return { key, token: lease.token, body, status: o.status, code: o.code, requestId: o.requestId! };
      }
    };

    const keys = Array.from({ length: KEYS }, (_, k) => `obj-${k}`);
    const granted = new Map<string, Lease[]>(keys.map((k) => [k, []]));
    const sent: Promise<Sent>[] = [];
    const doomed: Array<Promise<{ key: string; status: number | null; leaseId?: string }>> = [];
    for (let round = 0; round < ROUNDS; round++) {
      // Every key's grant of the round and the doomed grants in the same turn.
      const grants = keys.map((key) =>
        gw.leases.acquire({ bucket: BUCKET, key, ttlMs: 30_000, owner: `round-${round}` }),
      );
      for (let d = 0; d < DOOMED_PER_ROUND; d++) {
        const key = `doomed/${round}-${d}`;
        doomed.push(
          gw.leases.acquire({ bucket: BUCKET, key, ttlMs: 30_000, owner: `doomed-${round}-${d}` }).then(
            (l) => ({ key, status: 200, leaseId: l.leaseId }),
            (err: unknown) => ({ key, status: err instanceof LeaseApiError ? err.status : null }),
          ),
        );
      }
      const leases = await Promise.all(grants);
      const current: Promise<Sent>[] = [];
      keys.forEach((key, k) => {
        const lease = leases[k]!;
        const previous = granted.get(key)!;
        if (previous.length > 0) expect(lease.token).toBeGreaterThan(previous[previous.length - 1]!.token);
        for (let w = 0; w < CURRENT_PER_ROUND; w++) current.push(put(key, lease));
        for (let w = 0; w < OLD_PER_ROUND && previous.length > 0; w++) {
          sent.push(put(key, previous[Math.floor(Math.random() * previous.length)]!));
        }
        previous.push(lease);
      });
      sent.push(...current);
      for (const p of current) p.catch(() => undefined);
      // Hand the leases over while most of the round's writes are still in flight.
      await Promise.race(current);
      await Promise.all(leases.map((l) => gw.leases.release(l.leaseId)));
    }
    const results = await Promise.all(sent);
    const failedGrants = await Promise.all(doomed);

    // The store did commit in shared batches.
    expect(domains.size).toBe(1);
    const [domain] = [...domains];
    expect(domain!.stats.largestBatch, "no batch held more than one step").toBeGreaterThan(1);
    expect(domain!.stats.steps).toBeGreaterThan(domain!.stats.batches);

    // Every failed grant was answered as a failure, and left no lease behind: the key can be
    // leased at once, and no lease of a doomed owner is listed.
    expect(injected.length).toBe(ROUNDS * DOOMED_PER_ROUND);
    for (const g of failedGrants) expect(g.status, `doomed grant on ${g.key}`).toBe(500);
    const listed = (await gw.leases.list({ bucket: BUCKET })).leases;
    expect(listed.filter((l) => l.owner.startsWith("doomed-"))).toEqual([]);
    vi.restoreAllMocks();
    for (const g of failedGrants) {
      const again = await gw.leases.acquire({ bucket: BUCKET, key: g.key, ttlMs: 1000, owner: "after" });
      await gw.leases.release(again.leaseId);
    }

    // Writes: every answer is an acceptance or a fencing refusal, each audited as answered.
    const records = (await allAuditRecords(gw.leases, { bucket: BUCKET, op: "PutObject" })).filter((r) =>
      keys.includes(r.key ?? ""),
    );
    const byRequest = new Map(records.map((r) => [r.requestId, r]));
    for (const s of results) {
      if (s.status !== 200) {
        expect(s.status, `${s.key} token ${s.token}: ${s.code}`).toBe(409);
        expect(["StaleFencingToken", "LeaseExpired"]).toContain(s.code);
      }
      expect(byRequest.get(s.requestId), `audit record of ${s.requestId}`).toMatchObject({
        key: s.key,
        token: s.token,
        decision: s.status === 200 ? "accepted" : "rejected",
      });
    }
    expect(records).toHaveLength(results.length);
    expect(results.filter((s) => s.status === 409).length).toBeGreaterThanOrEqual(
      OLD_PER_ROUND * KEYS * (ROUNDS - 1),
    );
    for (const key of keys) {
      // Per object, in commit order, accepted tokens never decrease.
      let max = -1;
      for (const r of records.filter((x) => x.key === key && x.decision === "accepted")) {
        expect(r.token!, `${key}: accepted token ${r.token} after ${max}`).toBeGreaterThanOrEqual(max);
        max = r.token!;
      }
      const accepted = results.filter((s) => s.key === key && s.status === 200);
      expect(accepted.length, `${key} has no accepted write`).toBeGreaterThan(0);
      const top = Math.max(...accepted.map((s) => s.token));
      expect(max).toBe(top);
      const got = await clients[0]!.send(new GetObjectCommand({ Bucket: BUCKET, Key: key }));
      const body = await got.Body!.transformToString();
      expect(
        accepted.filter((s) => s.token === top).map((s) => s.body),
        `${key} holds a body that is not an accepted write with the highest token`,
      ).toContain(body);
    }
  });
});
