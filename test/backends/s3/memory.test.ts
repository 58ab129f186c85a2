import { createHash, randomUUID } from "node:crypto";
import { Readable } from "node:stream";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createS3Backend, type S3Backend } from "../../../src/backends/s3/index.js";
import { fencedCommit } from "../../../src/fence/commit.js";
import { metadataOf } from "../../support/bodies.js";
import { type GatewayProcess, spawnGateway, tempDir } from "../../support/gateway.js";
import { inMiB, type MemoryGrowth, MIB, memorySampler } from "../../support/memory.js";
import { backendOptions } from "./s3-fixture.js";

/**
 * A 100 MiB body streamed in and out through the backend keeps this process's memory flat: the
 * body is generated as it is read (no 100 MiB Buffer anywhere), the backend buffers one part
 * (8 MiB) at a time, and the GET streams. The store runs in its own process, so the RSS
 * measured here is the backend's alone. Peak RSS and retained memory are sampled during the
 * transfer (test/support/memory.ts).
 */

const SIZE = 100 * MIB;
/** What the transfer may hold at once (the S3 backend buffers one 8 MiB part), well under the body. */
const RETAINED_BOUND = 40 * MIB;
const RSS_BOUND = 60 * MIB;

function generated(size: number): { stream: Readable; md5: Promise<string> } {
  const md5 = createHash("md5");
  let resolveMd5!: (hex: string) => void;
  const done = new Promise<string>((r) => {
    resolveMd5 = r;
  });
  const stream = Readable.from(
    (async function* () {
      const chunk = Buffer.alloc(256 * 1024);
      for (let sent = 0, n = 0; sent < size; sent += chunk.length, n++) {
        chunk.fill(n & 0xff);
        chunk.writeUInt32BE(n, 0);
        const out = Buffer.from(chunk.subarray(0, Math.min(chunk.length, size - sent)));
        md5.update(out);
        yield out;
      }
      resolveMd5(md5.digest("hex"));
    })(),
  );
  return { stream, md5: done };
}

describe("memory while streaming 100 MiB", () => {
  let store: GatewayProcess;
  let dir: ReturnType<typeof tempDir>;
  let backend: S3Backend;
  let bucket: string;

  beforeAll(async () => {
    dir = tempDir("fencegate-s3-store-");
    store = await spawnGateway(dir.path, { FENCEGATE_FENCING: "optional" });
    backend = createS3Backend(backendOptions(store.url, { requestTimeoutMs: 60_000 }));
    bucket = `fg-mem-${randomUUID().slice(0, 8)}`;
    await backend.createBucket(bucket);
    // Warm up (SDK, sockets, the capability check) so that the measure is the transfer's.
    await backend.putObject(
      {
        bucket,
        key: "warm",
        body: {
          stream: generated(9 * MIB).stream,
          digest: Promise.resolve({ size: 9 * MIB, checksums: {} }),
        },
        metadata: metadataOf(),
      },
      fencedCommit(1),
    );
  }, 60_000);

  afterAll(async () => {
    await backend?.close();
    await store?.kill();
    dir?.cleanup();
  });

  it("puts and gets 100 MiB with RSS growth well under 100 MiB", async () => {
    let growth: MemoryGrowth;
    const sampler = memorySampler();
    try {
      const body = generated(SIZE);
      const put = await backend.putObject(
        {
          bucket,
          key: "big",
          body: { stream: body.stream, digest: Promise.resolve({ size: SIZE, checksums: {} }) },
          metadata: metadataOf(),
        },
        fencedCommit(2),
      );
      const md5 = await body.md5;
      expect(put).toMatchObject({ size: SIZE, etag: `"${md5}"` });

      const got = await backend.getObject(bucket, "big");
      expect(got.info.size).toBe(SIZE);
      const hash = createHash("md5");
      let read = 0;
      for await (const chunk of got.body) {
        hash.update(chunk as Buffer);
        read += (chunk as Buffer).length;
      }
      expect(read).toBe(SIZE);
      expect(hash.digest("hex")).toBe(md5);
    } finally {
      growth = sampler.stop();
    }
    // Shown in the test output: the figures the report quotes.
    console.info(`peak growth: RSS ${inMiB(growth.rss)} MiB, retained ${inMiB(growth.retained)} MiB`);
    expect(growth.retained).toBeLessThan(RETAINED_BOUND);
    expect(growth.rss).toBeLessThan(RSS_BOUND);
  }, 120_000);
});
