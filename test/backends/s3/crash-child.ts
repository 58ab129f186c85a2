/**
 * A gateway-like process for the kill -9 test: it writes one object through an S3Backend and
 * stops for good at a given point, printing `PAUSED <point>`, until the test SIGKILLs it.
 * Points: a commit step ("before-record-put", "after-record-put"), or "mid-body" (half-way
 * through a body longer than a part, with a store multipart upload open).
 */
import { Readable } from "node:stream";
import { createS3Backend, type S3CommitStep } from "../../../src/backends/s3/index.js";
import { DEV_ACCESS_KEY_ID, DEV_SECRET_ACCESS_KEY } from "../../../src/config/resolve.js";
import { fencedCommit } from "../../../src/fence/commit.js";

const env = (name: string): string => {
  const value = process.env[name];
  if (value === undefined) throw new Error(`${name} is not set`);
  return value;
};
const point = env("CRASH_AT");
const size = Number(env("BODY_SIZE"));
const stopForever = async (where: string) => {
  process.stdout.write(`PAUSED ${where}\n`);
  // A pending promise alone does not keep Node running: a timer does, until the SIGKILL.
  setInterval(() => undefined, 60_000);
  await new Promise(() => {});
};

const backend = createS3Backend({
  endpoint: env("STORE_URL"),
  region: "us-east-1",
  credentials: { accessKeyId: DEV_ACCESS_KEY_ID, secretAccessKey: DEV_SECRET_ACCESS_KEY },
  forcePathStyle: true,
  hooks: async (step: S3CommitStep) => {
    if (step === point) await stopForever(step);
  },
});

const stream = Readable.from(
  (async function* body() {
    const chunk = Buffer.alloc(1024 * 1024, 0x6e); // "n"
    for (let sent = 0; sent < size; sent += chunk.length) {
      if (point === "mid-body" && sent >= size / 2) await stopForever("mid-body");
      yield chunk.subarray(0, Math.min(chunk.length, size - sent));
    }
  })(),
);

await backend.putObject(
  {
    bucket: env("BUCKET"),
    key: env("KEY"),
    body: { stream, digest: Promise.resolve({ size, checksums: {} }) },
    metadata: { headers: {}, userMetadata: { writer: "child" } },
  },
  fencedCommit(Number(env("TOKEN"))),
);
process.stdout.write("DONE\n");
await backend.close();
