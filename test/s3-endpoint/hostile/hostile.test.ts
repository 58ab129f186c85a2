import { readdirSync, readFileSync, statSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { LeaseClient } from "../../../src/client/lease-client.js";
import { closedWithin, openSocket, sendRaw } from "../../http/raw-socket.js";
import { CREDENTIALS, type GatewayProcess, spawnGateway, tempDir } from "../../support/gateway.js";
import { objectPath, presign, rawRequest, signedRequest } from "../../support/signed-http.js";
import { sleep } from "../../support/wait.js";
import { buildCorpus } from "./corpus.js";
import { type CorpusEnv, runCases, useEndpoint } from "./corpus-kit.js";

/**
 * The hostile-input corpus against a gateway in its own process (its memory is its own): every
 * answer is a 4xx S3 error with a request id or a defined success, never a 5xx or a hang; the
 * process's RSS stays within 50 MiB; refused requests leave nothing in storage; slow, idle and
 * stalled clients are cut off by the configured timeouts while others are served.
 */

const HEADERS_TIMEOUT_MS = 1_000;
const IDLE_TIMEOUT_MS = 2_000;

const sandbox = tempDir("fencegate-hostile-");
const dataDir = join(sandbox.path, "data");
let gw: GatewayProcess;
let env: CorpusEnv;
const bucket = "hostile";

beforeAll(async () => {
  const configFile = join(sandbox.path, "fencegate.yaml");
  writeFileSync(
    configFile,
    [
      "server:",
      `  headersTimeoutMs: ${HEADERS_TIMEOUT_MS}`,
      `  idleTimeoutMs: ${IDLE_TIMEOUT_MS}`,
      "  keepAliveTimeoutMs: 1000",
      "leases:",
      "  maxWaitMs: 1000",
      "",
    ].join("\n"),
  );
  gw = await spawnGateway(dataDir, { FENCEGATE_CONFIG: configFile, FENCEGATE_LOG_LEVEL: "warn" });
  useEndpoint(gw.url);
  expect((await signedRequest(gw.url, { method: "PUT", path: `/${bucket}` })).status).toBe(200);
  const leases = new LeaseClient({ endpoint: gw.url, ...CREDENTIALS });
  const lease = await leases.acquire({ bucket, prefix: "", ttlMs: 600_000, owner: "hostile" });
  const token = { "x-fence-token": lease.fencingToken };
  const seeded = await signedRequest(gw.url, {
    method: "PUT",
    path: objectPath(bucket, "seed/object"),
    body: "seed object body",
    headers: token,
  });
  expect(seeded.status).toBe(200);
  const created = await signedRequest(gw.url, {
    method: "POST",
    path: objectPath(bucket, "seed/upload"),
    query: { uploads: "" },
    headers: token,
  });
  const uploadId = /<UploadId>([^<]+)<\/UploadId>/.exec(created.text)![1]!;
  const part = await signedRequest(gw.url, {
    method: "PUT",
    path: objectPath(bucket, "seed/upload"),
    query: { uploadId, partNumber: "1" },
    body: "part one",
    headers: token,
  });
  expect(part.status).toBe(200);
  env = {
    url: gw.url,
    host: new URL(gw.url).host,
    bucket,
    token: lease.fencingToken,
    uploadId,
    partEtag: String(part.headers.etag),
    presign: (method, path, expiresIn, signingDate, query) =>
      presign(gw.url, {
        method,
        path,
        expiresIn,
        ...(signingDate ? { signingDate } : {}),
        ...(query ? { query } : {}),
      }),
  };
});

afterAll(async () => {
  await gw?.kill();
  sandbox.cleanup();
});

/** Resident memory of the gateway process, in bytes. */
function rssOf(pid: number): number {
  const kb = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, "utf8"))?.[1];
  return Number(kb) * 1024;
}

function filesUnder(dir: string): string[] {
  const out: string[] = [];
  for (const name of readdirSync(dir)) {
    const p = join(dir, name);
    if (statSync(p).isDirectory()) out.push(...filesUnder(p));
    else out.push(p);
  }
  return out;
}

async function listed(): Promise<string[]> {
  const res = await signedRequest(gw.url, { method: "GET", path: `/${bucket}`, query: { "list-type": "2" } });
  return [...res.text.matchAll(/<Key>([^<]*)<\/Key>/g)].map((m) => m[1]!);
}

async function uploads(): Promise<string[]> {
  const res = await signedRequest(gw.url, { method: "GET", path: `/${bucket}`, query: { uploads: "" } });
  return [...res.text.matchAll(/<UploadId>([^<]*)<\/UploadId>/g)].map((m) => m[1]!);
}

async function buckets(): Promise<string[]> {
  const res = await signedRequest(gw.url, { method: "GET", path: "/" });
  return [...res.text.matchAll(/<Name>([^<]*)<\/Name>/g)].map((m) => m[1]!);
}

/** A normal request, answered within a second, while hostile clients hold their connections. */
async function normalRequestServed(): Promise<void> {
  const started = Date.now();
  const res = await signedRequest(gw.url, { method: "GET", path: objectPath(bucket, "seed/object") });
  expect(res.status).toBe(200);
  expect(res.text).toBe("seed object body");
  expect(Date.now() - started).toBeLessThan(1_000);
}

describe("the hostile-input corpus", () => {
  it("answers every case with a 4xx S3 error (or its defined success), within bounded memory, storing nothing", async () => {
    const corpus = buildCorpus(env);
    expect(corpus.length).toBeGreaterThanOrEqual(500);
    const names = new Set(corpus.map((c) => c.name));
    expect(names.size, "case names are unique").toBe(corpus.length);

    const blobsBefore = filesUnder(join(dataDir, "blobs")).sort();
    const objectsBefore = await listed();
    const uploadsBefore = await uploads();
    const bucketsBefore = await buckets();

    // A warm-up pass over part of the corpus, so that the measure is growth, not first use.
    expect(await runCases(corpus.filter((_, i) => i % 4 === 0))).toEqual([]);
    const rssBefore = rssOf(gw.child.pid!);
    const failures = await runCases(corpus);
    expect(failures, failures.join("\n")).toEqual([]);
    await normalRequestServed();
    const rssAfter = rssOf(gw.child.pid!);
    expect(rssAfter - rssBefore, `RSS ${rssBefore} -> ${rssAfter}`).toBeLessThan(50 * 1024 * 1024);

    // Nothing refused left a trace: no object, no upload, no bucket, no blob or temporary file.
    expect(await listed()).toEqual(objectsBefore);
    expect(await uploads()).toEqual(uploadsBefore);
    expect(await buckets()).toEqual(bucketsBefore);
    expect(filesUnder(join(dataDir, "blobs")).sort()).toEqual(blobsBefore);
    expect(readdirSync(sandbox.path).sort()).toEqual(["data", "fencegate.yaml"]);
  });
});

describe("slow, idle and stalled clients", () => {
  it("closes slowloris connections after the header timeout, serving others meanwhile", async () => {
    const sockets = await Promise.all(Array.from({ length: 50 }, () => openSocket(gw.url)));
    const answers: string[] = sockets.map(() => "");
    sockets.forEach((s, i) => {
      s.on("data", (d) => {
        answers[i] += d.toString();
      });
      s.on("error", () => undefined);
      s.write(`GET /${bucket} HTTP/1.1\r\nHost: ${env.host}\r\n`);
    });
    // One more header line every 200 ms: each connection stays busy, never completes its headers.
    const drip = setInterval(() => {
      for (const s of sockets) if (s.writable) s.write("X-Drip: 1\r\n");
    }, 200);
    try {
      const closed = Promise.all(sockets.map(closedWithin));
      await sleep(300);
      await normalRequestServed();
      const times = await Promise.race([closed, sleep(HEADERS_TIMEOUT_MS * 4).then(() => null)]);
      expect(times, "every slowloris connection closed").not.toBeNull();
      expect(Math.max(...times!)).toBeLessThan(HEADERS_TIMEOUT_MS * 3);
      // Told why, in S3's form, before being cut.
      expect(answers.filter((a) => a.includes("<Code>RequestTimeout</Code>")).length).toBeGreaterThan(40);
    } finally {
      clearInterval(drip);
      for (const s of sockets) s.destroy();
    }
  });

  it("keeps serving with 300 idle connections open, and closes them", async () => {
    const sockets = await Promise.all(Array.from({ length: 300 }, () => openSocket(gw.url)));
    for (const s of sockets) s.on("error", () => undefined);
    try {
      const closed = Promise.all(sockets.map(closedWithin));
      await normalRequestServed();
      const times = await Promise.race([closed, sleep(HEADERS_TIMEOUT_MS * 4).then(() => null)]);
      expect(times, "every idle connection closed").not.toBeNull();
    } finally {
      for (const s of sockets) s.destroy();
    }
  });

  it("cuts a reader that stops reading a large object after the idle timeout, serving others meanwhile", async () => {
    const big = Buffer.alloc(24 * 1024 * 1024, 7);
    const put = await signedRequest(gw.url, {
      method: "PUT",
      path: objectPath(bucket, "seed/big"),
      body: big,
      headers: { "x-fence-token": env.token },
    });
    expect(put.status).toBe(200);
    const rssBefore = rssOf(gw.child.pid!);
    const readers = await Promise.all(
      Array.from({ length: 4 }, async () => {
        const s = await openSocket(gw.url);
        s.on("error", () => undefined);
        const signedGet = await import("../../support/signed-http.js").then((m) =>
          m.signRequest(gw.url, { method: "GET", path: objectPath(bucket, "seed/big") }),
        );
        const head = [`GET ${signedGet.path} HTTP/1.1`];
        for (const [k, v] of Object.entries(signedGet.headers ?? {})) head.push(`${k}: ${v}`);
        s.write(`${head.join("\r\n")}\r\n\r\n`);
        // Reads the first bytes, then never again.
        await new Promise<void>((resolve) => s.once("data", () => resolve()));
        s.pause();
        return s;
      }),
    );
    try {
      await normalRequestServed();
      await sleep(IDLE_TIMEOUT_MS * 2.5);
      // Four stalled 24 MiB downloads did not pull the objects into memory.
      expect(rssOf(gw.child.pid!) - rssBefore).toBeLessThan(50 * 1024 * 1024);
      // Cut by the gateway: reading again finds the end after what the socket buffers held.
      const received = await Promise.all(
        readers.map(async (s) => {
          let bytes = 0;
          s.on("data", (d: Buffer) => {
            bytes += d.length;
          });
          const closed = await Promise.race([closedWithin(s), sleep(5_000).then(() => null)]);
          return { closed, bytes };
        }),
      );
      for (const r of received) {
        expect(r.closed, "the stalled reader was cut").not.toBeNull();
        expect(r.bytes).toBeLessThan(big.length / 2);
      }
    } finally {
      for (const s of readers) s.destroy();
    }
    const del = await signedRequest(gw.url, {
      method: "DELETE",
      path: objectPath(bucket, "seed/big"),
      headers: { "x-fence-token": env.token },
    });
    expect(del.status).toBe(204);
  });

  it("cuts a stalled upload after the idle timeout and stores nothing of it", async () => {
    const blobsBefore = filesUnder(join(dataDir, "blobs")).length;
    const s = await openSocket(gw.url);
    s.on("error", () => undefined);
    const { signRequest } = await import("../../support/signed-http.js");
    const req = await signRequest(gw.url, {
      method: "PUT",
      path: objectPath(bucket, "stalled"),
      payloadHash: "UNSIGNED-PAYLOAD",
      headers: { "x-fence-token": env.token, "content-length": "1000" },
    });
    const head = [`PUT ${req.path} HTTP/1.1`];
    for (const [k, v] of Object.entries(req.headers ?? {})) head.push(`${k}: ${v}`);
    s.write(`${head.join("\r\n")}\r\n\r\n${"x".repeat(100)}`);
    const closedIn = await Promise.race([closedWithin(s), sleep(IDLE_TIMEOUT_MS * 4).then(() => null)]);
    expect(closedIn, "the stalled upload was cut").not.toBeNull();
    await normalRequestServed();
    const got = await signedRequest(gw.url, { method: "GET", path: objectPath(bucket, "stalled") });
    expect(got.status).toBe(404);
    await sleep(200);
    expect(filesUnder(join(dataDir, "blobs")).length).toBe(blobsBefore);
  });

  it("answers a header section that never completes with RequestTimeout in S3 XML", async () => {
    const answer = await sendRaw(
      gw.url,
      `GET /${bucket} HTTP/1.1\r\nHost: ${env.host}\r\nX-Unfinished: 1\r\n`,
      {
        waitMs: HEADERS_TIMEOUT_MS * 4,
      },
    );
    expect(answer.status).toBe(400);
    expect(answer.body).toContain("<Code>RequestTimeout</Code>");
    expect(answer.headers["x-amz-request-id"]).toMatch(/^[0-9A-F]{16}$/);
    expect((await rawRequest(gw.url, { method: "GET", path: "/_fence/v1/health" })).status).toBe(200);
  });
});
