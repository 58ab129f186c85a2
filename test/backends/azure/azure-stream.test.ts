import { createHash, randomUUID } from "node:crypto";
import { Readable } from "node:stream";
import { expect, it } from "vitest";
import { fencedCommit } from "../../../src/fence/commit.js";
import { metadataOf } from "../../support/bodies.js";
import { inMiB, MIB, memorySampler } from "../../support/memory.js";
import { azureFixture, useAzurite } from "./azure-fixture.js";

/**
 * A 100 MiB body streams through the backend both ways without being held in memory: the
 * memory the process retains and its RSS (Azurite runs in its own process) grow by well under
 * the body's size (test/support/memory.ts).
 */

const azurite = useAzurite();

const SIZE = 100 * MIB;
/** What the transfer may hold at once (a few blocks in flight), well under the body. */
const RETAINED_BOUND = 40 * MIB;
const RSS_BOUND = 70 * MIB;

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

it("streams a 100 MiB put and get with RSS growth well under 100 MiB", async () => {
  const fx = await azureFixture(await azurite());
  const { backend } = fx;
  const bucket = `fg-big-${randomUUID().slice(0, 12)}`;
  await backend.createBucket(bucket);

  const body = generated();
  const putting = memorySampler();
  const written = await backend.putObject(
    {
      bucket,
      key: "hundred.bin",
      body: { stream: body.stream, digest: Promise.resolve({ size: SIZE, checksums: {} }) },
      metadata: metadataOf(),
    },
    fencedCommit(1),
  );
  const put = putting.stop();
  expect(written).toMatchObject({ size: SIZE, etag: `"${body.md5()}"` });

  const getting = memorySampler();
  const got = await backend.getObject(bucket, "hundred.bin");
  const hash = createHash("md5");
  let size = 0;
  for await (const chunk of got.body) {
    hash.update(chunk as Buffer);
    size += (chunk as Buffer).length;
  }
  const get = getting.stop();
  expect(size).toBe(SIZE);
  expect(`"${hash.digest("hex")}"`).toBe(written.etag);

  console.log(
    `100 MiB: RSS grew ${inMiB(put.rss)} MiB (put), ${inMiB(get.rss)} MiB (get); ` +
      `retained ${inMiB(put.retained)} MiB (put), ${inMiB(get.retained)} MiB (get)`,
  );
  for (const growth of [put, get]) {
    expect(growth.retained).toBeLessThan(RETAINED_BOUND);
    expect(growth.rss).toBeLessThan(RSS_BOUND);
  }
  await fx.cleanup();
}, 120_000);
