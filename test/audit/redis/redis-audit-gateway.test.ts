import { CreateBucketCommand, PutObjectCommand, type S3Client } from "@aws-sdk/client-s3";
import { afterEach, describe, expect, it } from "vitest";
import type { AuditRecord } from "../../../src/audit/audit-log.js";
import { HEALTH_PATH, startTestGateway, type TestGateway } from "../../support/gateway.js";
import { type RedisServer, startRedis } from "../../support/redis.js";
import { requireTools } from "../../support/tools.js";

requireTools("redis-server");

/** Two gateways whose audit logs are one log in Redis (`audit.type: redis`). */
describe("gateways sharing the Redis audit log", () => {
  const stops: Array<() => Promise<void>> = [];
  afterEach(async () => {
    for (const stop of stops.splice(0).reverse()) await stop();
  });

  async function gateway(redis: RedisServer, id: string): Promise<TestGateway> {
    const gw = await startTestGateway({
      env: { FENCEGATE_FENCING: "required" },
      overrides: { gatewayId: id, audit: { type: "redis", url: redis.url, keyPrefix: "{shared}" } },
    });
    stops.push(() => gw.stop());
    return gw;
  }

  const put = (s3: S3Client, key: string, token?: string) =>
    s3.send(
      new PutObjectCommand({
        Bucket: "shared",
        Key: key,
        Body: "x",
        ...(token ? { Metadata: { "fence-token": token } } : {}),
      }),
    );

  const status = (e: unknown) => (e as { $metadata?: { httpStatusCode?: number } }).$metadata?.httpStatusCode;

  it("records every gateway's decisions in one order, and answers 503 while Redis is down", async () => {
    let redis = await startRedis({ persistence: "aof" });
    stops.push(() => redis.stop());
    const [a, b] = [await gateway(redis, "gw-a"), await gateway(redis, "gw-b")];
    const [s3a, s3b] = [a.s3(), b.s3()];
    // Each has its own fs backend here; what they share is the audit log.
    for (const s3 of [s3a, s3b]) await s3.send(new CreateBucketCommand({ Bucket: "shared" }));
    const lease = await a.leases.acquire({ bucket: "shared", key: "k", ttlMs: 30_000 });
    await put(s3a, "k", lease.fencingToken);
    // Another gateway's refusal lands in the same log.
    await expect(put(s3b, "k")).rejects.toMatchObject({ name: "FencingTokenRequired" });

    const seen = (await b.leases.audit({ bucket: "shared" })).records as AuditRecord[];
    expect(seen.map((r) => [r.op, r.decision, r.gateway])).toEqual([
      ["LeaseAcquired", "accepted", "gw-a"],
      ["PutObject", "accepted", "gw-a"],
      ["PutObject", "rejected", "gw-b"],
    ]);
    expect(seen.map((r) => r.seq)).toEqual([...seen.map((r) => r.seq)].sort((x, y) => x - y));

    await redis.kill9();
    // No decision is answered without its record: the write answers 503 and changes nothing
    // anyone can see later; health names the failure.
    const refused = await put(s3a, "k", lease.fencingToken).then(
      () => null,
      (e: unknown) => e,
    );
    expect(status(refused)).toBe(503);
    expect((refused as { name?: string }).name).toBe("ServiceUnavailable");
    expect((await fetch(`${a.url}${HEALTH_PATH}`)).status).toBe(503);

    redis = await redis.restart();
    // The connection comes back by itself.
    let answered = false;
    for (let i = 0; i < 100 && !answered; i++) {
      answered = await put(s3a, "k", lease.fencingToken).then(
        () => true,
        async () => {
          await new Promise((r) => setTimeout(r, 100));
          return false;
        },
      );
    }
    expect(answered).toBe(true);
    expect((await fetch(`${a.url}${HEALTH_PATH}`)).status).toBe(200);
    const after = (await a.leases.audit({ bucket: "shared", op: "PutObject" })).records as AuditRecord[];
    expect(after.at(-1)).toMatchObject({ decision: "accepted", gateway: "gw-a", token: lease.token });
    expect(after.filter((r) => r.decision === "accepted").length).toBeGreaterThanOrEqual(2);
  });
});
