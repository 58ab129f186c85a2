import { createHash, randomUUID } from "node:crypto";
import { Readable } from "node:stream";
import { expect, it } from "vitest";
import { fencedCommit } from "../../../src/fence/commit.js";
import { metadataOf } from "../../support/bodies.js";
import { azureFixture, useAzurite } from "./azure-fixture.js";

/**
 * A 100 MiB body streams through the backend both ways without being held in memory: the
 * process's RSS (Azurite runs in its own process) grows by well under the body's size.
 */

const azurite = useAzurite();

const MIB = 1024 * 1024;
const SIZE = 100 * MIB;

const CHUNK = 64 * 1024;

/** SIZE bytes, generated 64 KiB at a time (each chunk differs), and their MD5. */
function generated(): { stream: Readable; md5: () => string } {
  const hash = createHash("md5");
  const chunk = Buffer.alloc(CHUNK);
  const stream = Readable.from(
    (function* chunks() {
      for (let i = 0; i < SIZE / CHUNK; i++) {
        chunk.fill(i & 0xff);
        chunk.writeUInt32BE(i, 0);
        const copy = Buffer.from(chunk);
        hash.update(copy);
        yield copy;
      }
    })(),
    { objectMode: false },
  );
  return { stream, md5: () => hash.digest("hex") };
}

function rssSampler() {
  const baseline = process.memoryUsage().rss;
  let peak = baseline;
  const timer = setInterval(() => {
    peak = Math.max(peak, process.memoryUsage().rss);
  }, 10);
  return {
    growth: () => {
      clearInterval(timer);
      peak = Math.max(peak, process.memoryUsage().rss);
      return peak - baseline;
    },
  };
}

it("streams a 100 MiB put and get with RSS growth well under 100 MiB", async () => {
  const fx = await azureFixture(await azurite());
  const { backend } = fx;
  const bucket = `fg-big-${randomUUID().slice(0, 12)}`;
  await backend.createBucket(bucket);

  const body = generated();
  const putting = rssSampler();
  const written = await backend.putObject(
    {
      bucket,
      key: "hundred.bin",
      body: { stream: body.stream, digest: Promise.resolve({ size: SIZE, checksums: {} }) },
      metadata: metadataOf(),
    },
    fencedCommit(1),
  );
  const putGrowth = putting.growth();
  expect(written).toMatchObject({ size: SIZE, etag: `"${body.md5()}"` });

  const getting = rssSampler();
  const got = await backend.getObject(bucket, "hundred.bin");
  const hash = createHash("md5");
  let size = 0;
  for await (const chunk of got.body) {
    hash.update(chunk as Buffer);
    size += (chunk as Buffer).length;
  }
  const getGrowth = getting.growth();
  expect(size).toBe(SIZE);
  expect(`"${hash.digest("hex")}"`).toBe(written.etag);

  console.log(
    `100 MiB: RSS grew ${(putGrowth / MIB).toFixed(1)} MiB (put), ${(getGrowth / MIB).toFixed(1)} MiB (get)`,
  );
  expect(putGrowth).toBeLessThan(70 * MIB);
  expect(getGrowth).toBeLessThan(70 * MIB);
  await fx.cleanup();
}, 120_000);
