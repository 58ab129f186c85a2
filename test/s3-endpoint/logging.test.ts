import { Writable } from "node:stream";
import { PutObjectCommand } from "@aws-sdk/client-s3";
import { afterAll, expect, it } from "vitest";
import { createLogger } from "../../src/core/log.js";
import { CREDENTIALS, startTestGateway, type TestGateway } from "../support/gateway.js";
import { sleep } from "../support/wait.js";

const lines: Array<Record<string, unknown>> = [];
const raw: string[] = [];
const sink = new Writable({
  write(chunk, _enc, done) {
    for (const line of String(chunk).split("\n").filter(Boolean)) {
      raw.push(line);
      lines.push(JSON.parse(line));
    }
    done();
  },
});
let gw: TestGateway;

afterAll(async () => {
  await gw?.stop();
});

it("logs JSON lines that carry the request id and never a secret or a fencing token", async () => {
  gw = await startTestGateway({
    env: { FENCEGATE_LOG_LEVEL: "debug" },
    log: createLogger("debug", {}, sink),
  });
  const { leases } = gw;
  const s3 = gw.s3();
  await s3.send(new PutObjectCommand({ Bucket: "nobucket", Key: "k", Body: "x" })).catch(() => undefined);
  const lease = await leases.acquire({ bucket: "logs", key: "k", ttlMs: 5_000 });
  const res = await s3
    .send(
      new PutObjectCommand({
        Bucket: "logs",
        Key: "k",
        Body: "x",
        Metadata: { "fence-token": lease.fencingToken },
      }),
    )
    .catch((e: { $metadata: { requestId?: string } }) => e);
  await sleep(50);

  const requestLines = lines.filter((l) => l.msg === "request refused" || l.msg === "s3 request");
  expect(requestLines.length).toBeGreaterThanOrEqual(3);
  for (const l of requestLines) expect(l.requestId).toMatch(/^[0-9A-F]{16}$/);
  const requestId = (res as { $metadata: { requestId?: string } }).$metadata.requestId;
  expect(lines.some((l) => l.requestId === requestId)).toBe(true);
  const all = raw.join("\n");
  expect(all).not.toContain(CREDENTIALS.secretAccessKey);
  expect(all).not.toContain(lease.fencingToken);
  expect(all).not.toContain(lease.fencingToken.split(".")[3]);
});
