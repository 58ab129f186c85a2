/**
 * A deployment upgraded from a version that kept token epochs as gateway objects
 * (leaseStore.epochs: bucket and prefix): an epoch record deleted through the old object path
 * still counts, so the first token after the upgrade is above every token ever granted.
 */
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { GetObjectCommand } from "@aws-sdk/client-s3";
import { afterEach, describe, expect, it } from "vitest";
import { createS3Backend } from "../../src/backends/s3/index.js";
import { unfencedCommit } from "../../src/fence/commit.js";
import { EPOCH_SPAN } from "../../src/leases/redis-shared/epoch-store.js";
import { backendOptions, rawClient, startStore } from "../backends/s3/s3-fixture.js";
import { verifiedBody } from "../support/bodies.js";
import { CREDENTIALS, startTestGateway, tempDir } from "../support/gateway.js";
import { startRedis } from "../support/redis.js";
import { requireTools } from "../support/tools.js";
import { grantTokens } from "./epochs-kit.js";

requireTools("redis-server");

const cleanups: Array<() => Promise<void> | void> = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

const LEGACY_BUCKET = "old-epochs";
const PREFIX = ".fencegate/redis-epochs/";

describe("epochs left by an older version", () => {
  it("S3: an epoch record deleted through the object path still counts after the upgrade", async () => {
    const store = await startStore();
    cleanups.push(() => store.stop());
    const redis = await startRedis({ persistence: "none" });
    cleanups.push(() => redis.stop());

    // What the older version left: its epochs 0 to 6 as objects, each written once with
    // If-None-Match: *, through the backend's object path; then epoch 6 deleted as an object.
    const old = createS3Backend(backendOptions(store.url));
    await old.createBucket(LEGACY_BUCKET);
    for (let epoch = 0; epoch <= 6; epoch++) {
      await old.putObject(
        {
          bucket: LEGACY_BUCKET,
          key: `${PREFIX}${String(epoch).padStart(7, "0")}`,
          body: verifiedBody(JSON.stringify({ epoch })),
          metadata: { headers: {}, userMetadata: {} },
        },
        unfencedCommit({ conditions: { ifNoneMatch: "*" } }),
      );
    }
    await old.deleteObject({ bucket: LEGACY_BUCKET, key: `${PREFIX}0000006` }, unfencedCommit());
    expect((await old.headObject(LEGACY_BUCKET, `${PREFIX}0000005`)).size).toBeGreaterThan(0);
    await expect(old.headObject(LEGACY_BUCKET, `${PREFIX}0000006`)).rejects.toMatchObject({
      code: "NoSuchKey",
    });
    await old.close();

    // The older version's configuration, unchanged; Redis empty (it lost its data at the upgrade).
    const dir = tempDir("fencegate-legacy-");
    cleanups.push(() => dir.cleanup());
    const file = join(dir.path, "fencegate.yaml");
    writeFileSync(
      file,
      [
        "backend:",
        "  type: s3",
        `  endpoint: ${store.url}`,
        "  region: us-east-1",
        `  accessKeyId: ${CREDENTIALS.accessKeyId}`,
        `  secretAccessKey: ${CREDENTIALS.secretAccessKey}`,
        "  forcePathStyle: true",
        "leaseStore:",
        "  type: redis",
        `  url: ${redis.url}`,
        `  epochs: { bucket: ${LEGACY_BUCKET}, prefix: ${PREFIX} }`,
        "",
      ].join("\n"),
    );
    const gw = await startTestGateway({ env: { FENCEGATE_CONFIG: file } });
    cleanups.push(() => gw.stop());
    const [token] = await grantTokens(gw, "after-upgrade", 1);
    // Epoch 6 was used (its tokens were 6 × 2^32 + 1, ...): the new one is 7.
    expect(token).toBe(7 * EPOCH_SPAN + 1);

    // The new epoch is a record of the bucket the configuration named.
    const raw = rawClient(store);
    cleanups.push(() => raw.destroy());
    const record = await raw.send(
      new GetObjectCommand({ Bucket: LEGACY_BUCKET, Key: ".fencegate/epochs/0000007" }),
    );
    expect(JSON.parse(await record.Body!.transformToString())).toMatchObject({ epoch: 7 });
  }, 30_000);
});
