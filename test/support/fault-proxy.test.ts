import { fork } from "node:child_process";
import { createHash, randomUUID } from "node:crypto";
import { Agent, createServer, type IncomingMessage, request, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { join } from "node:path";
import { Readable } from "node:stream";
import {
  CreateBucketCommand,
  CreateMultipartUploadCommand,
  DeleteObjectCommand,
  GetObjectCommand,
  HeadObjectCommand,
  ListMultipartUploadsCommand,
  ListObjectsV2Command,
  PutObjectCommand,
  type S3Client,
} from "@aws-sdk/client-s3";
import { BlobServiceClient } from "@azure/storage-blob";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { azuriteConnectionString, startAzurite } from "./azurite.js";
import { type HttpFaultProxy, startHttpFaultProxy } from "./fault-proxy.js";
import { s3Client, startTestGateway, type TestGateway } from "./gateway.js";
import { inMiB, type MemoryGrowth, MIB } from "./memory.js";
import { hasExited, trackChild } from "./processes.js";
import { sleep, waitFor } from "./wait.js";

/**
 * The HTTP fault proxy against real servers: a fencegate gateway (fs backend, optional fencing)
 * as the S3 store, driven with @aws-sdk/client-s3 through the proxy and read directly to see
 * what reached it; and a small echo server where the bytes on the wire are the point.
 */

let store: TestGateway;
let direct: S3Client;
const bucket = `proxied-${randomUUID().slice(0, 8)}`;

beforeAll(async () => {
  store = await startTestGateway({ env: { FENCEGATE_FENCING: "optional" } });
  direct = store.s3();
  await direct.send(new CreateBucketCommand({ Bucket: bucket }));
});
afterAll(async () => {
  direct?.destroy();
  await store?.stop();
});

const cleanups: Array<() => Promise<void> | void> = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

async function proxyTo(url: string): Promise<HttpFaultProxy> {
  const proxy = await startHttpFaultProxy(url);
  cleanups.push(() => proxy.close());
  return proxy;
}

/** An S3 client that goes through the proxy. */
function through(proxy: HttpFaultProxy, extra: Parameters<typeof s3Client>[1] = {}): S3Client {
  const client = s3Client(proxy.url, extra);
  cleanups.push(() => client.destroy());
  return client;
}

/** What the store holds at `key` (read directly), or null. */
async function stored(key: string): Promise<string | null> {
  try {
    const got = await direct.send(new GetObjectCommand({ Bucket: bucket, Key: key }));
    return await got.Body!.transformToString();
  } catch (e) {
    if ((e as Error).name === "NoSuchKey") return null;
    throw e;
  }
}

/** A fault proxy in a child process (fault-proxy-child.ts), whose memory growth can be measured. */
async function proxyProcess(target: string) {
  const child = fork(join(import.meta.dirname, "fault-proxy-child.ts"), [target], {
    execArgv: ["--import", "tsx"],
    stdio: ["ignore", "inherit", "inherit", "ipc"],
  });
  trackChild(child);
  cleanups.push(async () => {
    if (child.connected) child.send("close");
    if (!hasExited(child)) await new Promise((resolve) => child.once("exit", resolve));
  });
  const next = () =>
    new Promise<unknown>((resolve, reject) => {
      child.once("message", resolve);
      child.once("exit", (code) => reject(new Error(`the proxy process exited (${code})`)));
    });
  const { url } = (await next()) as { url: string };
  return {
    url,
    async start() {
      child.send("start");
      await next();
    },
    async stop(): Promise<MemoryGrowth> {
      child.send("stop");
      return ((await next()) as { growth: MemoryGrowth }).growth;
    },
  };
}

/** Reads a stream a chunk every 2 ms (about 30 MiB/s with 64 KiB chunks). */
function readSlowly(stream: Readable, count: (bytes: number) => void): void {
  stream.on("data", (chunk: Buffer) => {
    count(chunk.length);
    stream.pause();
    setTimeout(() => stream.resume(), 2);
  });
}

/** Rejects when `promise` has not settled within `ms`: a hold that never happens fails fast. */
function within<T>(promise: Promise<T>, ms = 5_000): Promise<T> {
  return Promise.race([
    promise,
    sleep(ms).then(() => Promise.reject(new Error(`not reached within ${ms} ms`))),
  ]);
}

const uniqueKey = (name: string) => `${name}-${randomUUID().slice(0, 8)}`;

type Echoed = { method: string; url: string; rawHeaders: string[]; body: string };

/**
 * A plain HTTP server that records every request (raw headers and body) and answers 200 with
 * repeated answer headers, so that a test can compare bytes on both sides of the proxy.
 */
async function echoServer(): Promise<{ url: string; got: Echoed[] }> {
  const got: Echoed[] = [];
  const server: Server = createServer(async (req, res) => {
    const chunks: Buffer[] = [];
    try {
      for await (const chunk of req) chunks.push(chunk as Buffer);
    } catch {
      return; // a request cut off on the way: not taken
    }
    const echoed = {
      method: req.method!,
      url: req.url!,
      rawHeaders: req.rawHeaders,
      body: Buffer.concat(chunks).toString(),
    };
    got.push(echoed);
    res.writeHead(200, ["Content-Type", "application/json", "X-Repeated", "one", "X-Repeated", "two"]);
    res.end(JSON.stringify(echoed));
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  cleanups.push(
    () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  );
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, got };
}

/** One raw request through Node's http client: the answer's status, raw headers and body. */
function raw(
  url: string,
  opts: { method?: string; path?: string; headers?: string[]; body?: string | Readable; agent?: Agent } = {},
): Promise<{ status: number; rawHeaders: string[]; body: Buffer }> {
  const to = new URL(url);
  return new Promise((resolve, reject) => {
    const req = request(
      {
        host: to.hostname,
        port: to.port,
        method: opts.method ?? "GET",
        path: opts.path ?? "/",
        // Raw headers: Node adds no Host then, so it goes first unless the test sends its own.
        headers: (opts.headers ?? []).some((h, i) => i % 2 === 0 && h.toLowerCase() === "host")
          ? opts.headers
          : ["Host", to.host, ...(opts.headers ?? [])],
        agent: opts.agent ?? false,
      },
      (res: IncomingMessage) => {
        const chunks: Buffer[] = [];
        res.on("data", (c: Buffer) => chunks.push(c));
        res.on("end", () =>
          resolve({ status: res.statusCode!, rawHeaders: res.rawHeaders, body: Buffer.concat(chunks) }),
        );
        res.on("error", reject);
      },
    );
    req.on("error", reject);
    if (opts.body instanceof Readable) opts.body.pipe(req);
    else req.end(opts.body);
  });
}

describe("forwarding", () => {
  it("passes S3 requests through unchanged (SigV4 verifies), keeping connections alive on both sides", async () => {
    const proxy = await proxyTo(store.url);
    const agent = new Agent({ keepAlive: true, maxSockets: 1 });
    cleanups.push(() => agent.destroy());
    const s3 = through(proxy, { requestHandler: { httpAgent: agent } });
    const key = uniqueKey("plain");

    await s3.send(new PutObjectCommand({ Bucket: bucket, Key: key, Body: "buffered body" }));
    // A stream body goes as aws-chunked with a trailing checksum.
    await s3.send(
      new PutObjectCommand({
        Bucket: bucket,
        Key: `${key}-s`,
        Body: Readable.from([Buffer.from("streamed body")]),
        ContentLength: 13,
      }),
    );
    const got = await s3.send(new GetObjectCommand({ Bucket: bucket, Key: key }));
    expect(await got.Body!.transformToString()).toBe("buffered body");
    expect((await s3.send(new HeadObjectCommand({ Bucket: bucket, Key: `${key}-s` }))).ContentLength).toBe(
      13,
    );
    const listed = await s3.send(new ListObjectsV2Command({ Bucket: bucket, Prefix: key }));
    expect(listed.Contents?.map((o) => o.Key)).toEqual([key, `${key}-s`]);
    await s3.send(new DeleteObjectCommand({ Bucket: bucket, Key: `${key}-s` }));

    expect(await stored(key)).toBe("buffered body");
    expect(await stored(`${key}-s`)).toBeNull();
    expect(proxy.seen.map((s) => [s.method, s.path, s.action, s.status])).toEqual([
      ["PUT", `/${bucket}/${key}`, "forward", 200],
      ["PUT", `/${bucket}/${key}-s`, "forward", 200],
      ["GET", `/${bucket}/${key}`, "forward", 200],
      ["HEAD", `/${bucket}/${key}-s`, "forward", 200],
      ["GET", `/${bucket}/`, "forward", 200],
      ["DELETE", `/${bucket}/${key}-s`, "forward", 204],
    ]);
    expect(proxy.seen[4]!.query).toContain("list-type=2");
    // Six requests, one connection on each side.
    expect(proxy.stats).toEqual({ clientConnections: 1, storeConnections: 1 });
  });

  it("keeps every header as sent, both ways: names, case, order, repeats and Host", async () => {
    const echo = await echoServer();
    const proxy = await proxyTo(echo.url);
    const headers = [
      "Host",
      "example.test:1234",
      "X-Amz-Meta-A",
      "1",
      "x-amz-meta-a",
      "2",
      "X-MiXeD",
      "v",
      "Content-Length",
      "4",
    ];
    const answer = await raw(proxy.url, { method: "PUT", path: "/b/k%20y?x=1", headers, body: "body" });
    expect(answer.status).toBe(200);
    expect(echo.got).toHaveLength(1);
    expect(echo.got[0]!.rawHeaders.slice(0, headers.length)).toEqual(headers);
    expect(echo.got[0]!.url).toBe("/b/k%20y?x=1");
    expect(echo.got[0]!.body).toBe("body");
    const repeated = answer.rawHeaders.flatMap((h, i) =>
      h === "X-Repeated" ? [answer.rawHeaders[i + 1]] : [],
    );
    expect(repeated).toEqual(["one", "two"]);
    expect(proxy.seen[0]).toMatchObject({
      method: "PUT",
      path: "/b/k y",
      query: "x=1",
      action: "forward",
      status: 200,
    });
  });

  it("streams a 20 MiB body each way without holding it: its memory grows by far less than that", async () => {
    const SIZE = 20 * MIB;
    const CHUNK = 64 * 1024;
    const generate = () =>
      Readable.from(
        (function* () {
          for (let i = 0; i < SIZE / CHUNK; i++) yield Buffer.alloc(CHUNK, i & 0xff);
        })(),
      );
    // The far end counts bytes (uploads) or generates them (downloads); nothing keeps them.
    // Receivers read slowly, so that a proxy that kept the body would have to keep all of it,
    // while one that streams holds a few chunks (and little garbage piles up between two
    // collections of the memory sampler).
    let received = 0;
    const server = createServer((req, res) => {
      if (req.method === "PUT") {
        readSlowly(req, (n) => {
          received += n;
        });
        req.on("end", () => res.end("ok"));
      } else {
        res.writeHead(200, { "Content-Length": String(SIZE) });
        generate().pipe(res);
      }
    });
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    cleanups.push(() => new Promise<void>((resolve) => server.close(() => resolve())));
    // The proxy runs in a process of its own: what is measured is the proxy alone, not the two
    // ends of the transfer in this process.
    const proxy = await proxyProcess(`http://127.0.0.1:${(server.address() as AddressInfo).port}`);

    await proxy.start();
    const put = await raw(proxy.url, {
      method: "PUT",
      headers: ["Content-Length", String(SIZE)],
      body: generate(),
    });
    const upGrowth = await proxy.stop();
    expect(put.status).toBe(200);
    expect(received).toBe(SIZE);

    await proxy.start();
    let got = 0;
    const status = await new Promise<number>((resolve, reject) => {
      request(`${proxy.url}/big`, (res) => {
        readSlowly(res, (n) => {
          got += n;
        });
        res.on("end", () => resolve(res.statusCode!));
      })
        .on("error", reject)
        .end();
    });
    const downGrowth = await proxy.stop();
    expect(status).toBe(200);
    expect(got).toBe(SIZE);

    console.log(
      `20 MiB through the proxy: retained ${inMiB(upGrowth.retained)} MiB (up), ${inMiB(downGrowth.retained)} MiB (down); ` +
        `RSS ${inMiB(upGrowth.rss)} MiB (up), ${inMiB(downGrowth.rss)} MiB (down)`,
    );
    // Streaming, each grows by about 10 MiB at most (garbage between two collections); a proxy
    // that keeps the body grows by twice its size (its chunks, then the whole).
    for (const growth of [upGrowth, downGrowth]) {
      expect(growth.rss).toBeLessThan(SIZE);
      expect(growth.retained).toBeLessThan(SIZE);
    }
  });

  it("carries a 20 MiB aws-chunked upload to the S3 store intact", async () => {
    const proxy = await proxyTo(store.url);
    const s3 = through(proxy);
    const key = uniqueKey("large");
    const SIZE = 20 * MIB;
    const sent = createHash("md5");
    const body = Readable.from(
      (function* () {
        for (let i = 0; i < SIZE / MIB; i++) {
          const chunk = Buffer.alloc(MIB, i);
          sent.update(chunk);
          yield chunk;
        }
      })(),
    );
    await s3.send(new PutObjectCommand({ Bucket: bucket, Key: key, Body: body, ContentLength: SIZE }));
    const got = await direct.send(new GetObjectCommand({ Bucket: bucket, Key: key }));
    const read = createHash("md5");
    for await (const chunk of got.Body as Readable) read.update(chunk as Buffer);
    expect(read.digest("hex")).toBe(sent.digest("hex"));
  });
});

describe("Azurite", () => {
  it("Azure SDK requests verify through it (SharedKey); a dropped answer's Put Blob landed", async () => {
    const azurite = await startAzurite({ inMemory: true });
    cleanups.push(() => azurite.stop());
    const proxy = await proxyTo(azurite.url);
    const proxied = BlobServiceClient.fromConnectionString(azuriteConnectionString(proxy.port), {
      // One try: the SDK would otherwise send the PUT again and hear the second answer.
      retryOptions: { maxTries: 1 },
    });
    const straight = BlobServiceClient.fromConnectionString(azurite.connectionString);
    const container = proxied.getContainerClient(`c${randomUUID().slice(0, 8)}`);
    await container.create();
    await container.getBlockBlobClient("kept").upload("kept", 4);
    expect(
      (await straight.getContainerClient(container.containerName).getBlobClient("kept").getProperties())
        .contentLength,
    ).toBe(4);

    proxy.on({ method: "PUT", path: /\/lost$/ }, { kind: "drop-answer" });
    const blob = proxied.getContainerClient(container.containerName).getBlockBlobClient("lost");
    await expect(blob.upload("landed", 6, { abortSignal: AbortSignal.timeout(10_000) })).rejects.toThrow();
    const landed = await straight
      .getContainerClient(container.containerName)
      .getBlobClient("lost")
      .downloadToBuffer();
    expect(landed.toString()).toBe("landed");
    expect(proxy.seen.filter((s) => s.path.endsWith("/lost"))).toEqual([
      expect.objectContaining({ method: "PUT", action: "drop-answer", status: 201 }),
    ]);
  });
});

describe("actions", () => {
  it("hold: nothing reaches the store until release; other requests pass meanwhile", async () => {
    const proxy = await proxyTo(store.url);
    const s3 = through(proxy);
    const key = uniqueKey("held");
    const rule = proxy.on({ method: "PUT", path: `/${bucket}/${key}` }, { kind: "hold" });

    let answered = false;
    const put = s3.send(new PutObjectCommand({ Bucket: bucket, Key: key, Body: "held body" })).finally(() => {
      answered = true;
    });
    const info = await within(rule.reached);
    expect(info).toMatchObject({ method: "PUT", path: `/${bucket}/${key}` });
    expect(rule.held).toBe(1);
    await sleep(200);
    expect(await stored(key)).toBeNull();
    expect(answered).toBe(false);
    // The rule took its one request: the same PUT again passes.
    await s3.send(new PutObjectCommand({ Bucket: bucket, Key: `${key}-other`, Body: "x" }));

    rule.release();
    expect((await put).$metadata.httpStatusCode).toBe(200);
    expect(await stored(key)).toBe("held body");
    expect(rule.count).toBe(1);
    expect(rule.held).toBe(0);
    expect(proxy.seen.map((s) => s.action)).toEqual(["hold", "forward"]);
  });

  it("hold: a released request reaches the store even when its client went away", async () => {
    const proxy = await proxyTo(store.url);
    const s3 = through(proxy);
    const key = uniqueKey("orphan");
    const rule = proxy.on({ method: "PUT", path: /orphan-/ }, { kind: "hold" });
    const abort = new AbortController();
    const put = s3.send(new PutObjectCommand({ Bucket: bucket, Key: key, Body: "sent by a dead client" }), {
      abortSignal: abort.signal,
    });
    await within(rule.reached);
    abort.abort();
    await expect(put).rejects.toThrow();
    await sleep(50);
    expect(await stored(key)).toBeNull();
    rule.release();
    expect(
      await waitFor(() => stored(key), { what: "the released PUT in the store", timeoutMs: 5_000 }),
    ).toBe("sent by a dead client");
    await waitFor(() => proxy.seen[0]!.error, { what: "the lost answer noted", timeoutMs: 5_000 });
    expect(proxy.seen[0]).toMatchObject({
      action: "hold",
      status: 200,
      error: expect.stringMatching(/went away/),
    });
  });

  it("delay: the request reaches the store after the delay", async () => {
    const proxy = await proxyTo(store.url);
    const s3 = through(proxy);
    const key = uniqueKey("late");
    proxy.on({ method: "PUT" }, { kind: "delay", ms: 600 });
    const started = Date.now();
    const put = s3.send(new PutObjectCommand({ Bucket: bucket, Key: key, Body: "late" }));
    await sleep(100);
    expect(await stored(key)).toBeNull();
    await put;
    // Node's timers count from the event loop's cached time: one may fire a few ms early by Date.now().
    expect(Date.now() - started).toBeGreaterThanOrEqual(595);
    expect(await stored(key)).toBe("late");
    expect(proxy.seen[0]).toMatchObject({ action: "delay", status: 200 });
  });

  it("drop-answer: the PUT lands in the store, the client gets a socket error", async () => {
    const proxy = await proxyTo(store.url);
    const s3 = through(proxy);
    const key = uniqueKey("dropped");
    proxy.on({ method: "PUT" }, { kind: "drop-answer" });
    const error = await s3.send(new PutObjectCommand({ Bucket: bucket, Key: key, Body: "landed" })).then(
      () => null,
      (e: Error) => e,
    );
    expect(error).not.toBeNull();
    expect((error as { $metadata?: { httpStatusCode?: number } }).$metadata?.httpStatusCode).toBeUndefined();
    expect(String((error as NodeJS.ErrnoException).code ?? error!.message)).toMatch(
      /ECONNRESET|socket hang up/,
    );
    expect(await stored(key)).toBe("landed");
    expect(proxy.seen[0]).toMatchObject({ action: "drop-answer", status: 200 });
  });

  it("delay-answer: the answer comes after the client's timeout; the PUT landed all the same", async () => {
    const proxy = await proxyTo(store.url);
    const impatient = through(proxy, {
      requestHandler: { requestTimeout: 300, throwOnRequestTimeout: true },
    });
    const key = uniqueKey("slow-answer");
    proxy.on({ method: "PUT" }, { kind: "delay-answer", ms: 1_000 });
    const started = Date.now();
    await expect(
      impatient.send(new PutObjectCommand({ Bucket: bucket, Key: key, Body: "v" })),
    ).rejects.toThrow(/timed? ?out/i);
    expect(Date.now() - started).toBeLessThan(1_000);
    expect(await stored(key)).toBe("v");

    // A patient client gets the answer, late.
    proxy.on({ method: "PUT" }, { kind: "delay-answer", ms: 400 });
    const patient = through(proxy);
    const again = Date.now();
    const put = await patient.send(new PutObjectCommand({ Bucket: bucket, Key: `${key}-2`, Body: "w" }));
    expect(put.$metadata.httpStatusCode).toBe(200);
    expect(Date.now() - again).toBeGreaterThanOrEqual(400);
    expect(proxy.seen.map((s) => [s.action, s.status])).toEqual([
      ["delay-answer", 200],
      ["delay-answer", 200],
    ]);
    await waitFor(() => proxy.seen[0]!.error, { what: "the first answer found no client", timeoutMs: 5_000 });
    expect(proxy.seen[0]!.error).toMatch(/went away/);
  });

  it("reset: the client's connection is reset and nothing reaches the store", async () => {
    const proxy = await proxyTo(store.url);
    const s3 = through(proxy);
    const key = uniqueKey("reset");
    proxy.on({ method: "PUT" }, { kind: "reset" });
    await expect(
      s3.send(new PutObjectCommand({ Bucket: bucket, Key: key, Body: "never" })),
    ).rejects.toThrow();
    await sleep(100);
    expect(await stored(key)).toBeNull();
    expect(proxy.seen[0]).toMatchObject({ action: "reset" });
    expect(proxy.seen[0]!.status).toBeUndefined();
    expect(proxy.stats.storeConnections).toBe(0);
  });

  it("duplicate: the store acts twice (two multipart uploads), the client hears of one", async () => {
    const proxy = await proxyTo(store.url);
    const s3 = through(proxy);
    const key = uniqueKey("twice");
    proxy.on({ method: "POST", query: (q) => q.has("uploads") }, { kind: "duplicate" });
    const created = await s3.send(new CreateMultipartUploadCommand({ Bucket: bucket, Key: key }));
    const uploads = await direct.send(new ListMultipartUploadsCommand({ Bucket: bucket, Prefix: key }));
    const ids = (uploads.Uploads ?? []).map((u) => u.UploadId);
    expect(ids).toHaveLength(2);
    expect(ids).toContain(created.UploadId);
    expect(proxy.seen[0]).toMatchObject({ action: "duplicate", status: 200, duplicateStatus: 200 });
  });

  it("duplicate: both copies carry the same headers and body", async () => {
    const echo = await echoServer();
    const proxy = await proxyTo(echo.url);
    proxy.on({ method: "PUT" }, { kind: "duplicate" });
    const answer = await raw(proxy.url, {
      method: "PUT",
      path: "/d",
      headers: ["Content-Length", "5"],
      body: "twice",
    });
    expect(answer.status).toBe(200);
    expect(echo.got).toHaveLength(2);
    expect(echo.got[1]).toEqual(echo.got[0]);
    expect(echo.got[0]!.body).toBe("twice");
  });
});

describe("rules", () => {
  it("match by method, path prefix, RegExp or predicate, headers and query; first rule added wins", async () => {
    const echo = await echoServer();
    const proxy = await proxyTo(echo.url);
    const reset = { kind: "reset" } as const;
    const byMethods = proxy.on({ method: ["DELETE", "POST"] }, reset, { times: Infinity });
    const byPrefix = proxy.on({ path: "/pre/" }, reset, { times: Infinity });
    const byRegExp = proxy.on({ path: /\.bin$/ }, reset, { times: Infinity });
    const byPredicate = proxy.on({ path: (p) => p.includes(" space") }, reset, { times: Infinity });
    const byHeader = proxy.on({ headers: (h) => h["x-fault"] === "yes" }, reset, { times: Infinity });
    const byQuery = proxy.on({ query: (q) => q.get("part") === "3" }, reset, { times: Infinity });
    // Never reached: the rule above takes "/pre/..." first.
    const shadowed = proxy.on({ path: "/pre/x" }, { kind: "delay", ms: 1 }, { times: Infinity });

    const outcome = (opts: Parameters<typeof raw>[1]) =>
      raw(proxy.url, opts).then(
        () => "passed",
        () => "reset",
      );
    expect(await outcome({ method: "DELETE", path: "/a" })).toBe("reset");
    expect(await outcome({ method: "POST", path: "/a" })).toBe("reset");
    expect(await outcome({ path: "/pre/x" })).toBe("reset");
    expect(await outcome({ path: "/prefix" })).toBe("passed");
    expect(await outcome({ path: "/a/b.bin" })).toBe("reset");
    expect(await outcome({ path: "/with%20space" })).toBe("reset");
    expect(await outcome({ path: "/h", headers: ["X-Fault", "yes"] })).toBe("reset");
    expect(await outcome({ path: "/h", headers: ["X-Fault", "no"] })).toBe("passed");
    expect(await outcome({ path: "/q?part=3" })).toBe("reset");
    expect(await outcome({ path: "/q?part=4" })).toBe("passed");
    expect(await outcome({ path: "/a" })).toBe("passed");

    expect(
      [byMethods, byPrefix, byRegExp, byPredicate, byHeader, byQuery, shadowed].map((r) => r.count),
    ).toEqual([2, 1, 1, 1, 1, 1, 0]);
    expect(echo.got.map((g) => g.url)).toEqual(["/prefix", "/h", "/q?part=4", "/a"]);
  });

  it("times limits how many requests a rule takes; cancel disarms it and releases what it holds", async () => {
    const echo = await echoServer();
    const proxy = await proxyTo(echo.url);
    const twice = proxy.on({ path: "/r" }, { kind: "reset" }, { times: 2 });
    const outcomes: string[] = [];
    for (let i = 0; i < 3; i++)
      outcomes.push(
        await raw(proxy.url, { path: "/r" }).then(
          () => "passed",
          () => "reset",
        ),
      );
    expect(outcomes).toEqual(["reset", "reset", "passed"]);
    expect(twice.count).toBe(2);

    const holdAll = proxy.on({ path: "/h" }, { kind: "hold" }, { times: Infinity });
    const first = raw(proxy.url, { path: "/h" });
    const second = raw(proxy.url, { path: "/h" });
    await waitFor(() => holdAll.held === 2, { what: "both held" });
    expect(echo.got.filter((g) => g.url === "/h")).toHaveLength(0);
    holdAll.release();
    expect((await first).status).toBe(200);
    expect((await second).status).toBe(200);
    // Still armed: the next one is held again, until cancel().
    const third = raw(proxy.url, { path: "/h" });
    await waitFor(() => holdAll.held === 1, { what: "the third held" });
    holdAll.cancel();
    expect((await third).status).toBe(200);
    expect((await raw(proxy.url, { path: "/h" })).status).toBe(200);
    expect(holdAll.count).toBe(3);
    expect(echo.got.filter((g) => g.url === "/h")).toHaveLength(4);
  });

  it("partition: new connections and requests are reset until it ends; answers during it are lost", async () => {
    const echo = await echoServer();
    const proxy = await proxyTo(echo.url);
    const agent = new Agent({ keepAlive: true, maxSockets: 1 });
    cleanups.push(() => agent.destroy());
    expect((await raw(proxy.url, { path: "/before", agent })).status).toBe(200);

    proxy.partition(true);
    // On the connection kept alive, and on a new one.
    await expect(raw(proxy.url, { path: "/during", agent })).rejects.toThrow();
    await expect(raw(proxy.url, { path: "/during" })).rejects.toThrow();
    proxy.partition(false);
    expect((await raw(proxy.url, { path: "/after", agent })).status).toBe(200);
    expect(echo.got.map((g) => g.url)).toEqual(["/before", "/after"]);
    expect(proxy.seen.filter((s) => s.action === "partitioned").map((s) => s.path)).toEqual(["/during"]);

    // An answer on its way back when the partition starts is lost; the store did act.
    const answer = proxy.on({ path: "/slow" }, { kind: "delay-answer", ms: 200 });
    const slow = raw(proxy.url, { path: "/slow" });
    await within(answer.reached);
    proxy.partition(true);
    await expect(slow).rejects.toThrow();
    proxy.partition(false);
    expect(echo.got.map((g) => g.url)).toContain("/slow");
    expect(proxy.seen.find((s) => s.path === "/slow")?.error).toMatch(/partition/);
  });

  it("clear: no rules, no partition, nothing seen; a held request is released", async () => {
    const echo = await echoServer();
    const proxy = await proxyTo(echo.url);
    const hold = proxy.on({}, { kind: "hold" });
    const held = raw(proxy.url, { path: "/x" });
    await within(hold.reached);
    proxy.partition(true);
    proxy.clear();
    expect((await held).status).toBe(200);
    expect(proxy.seen).toEqual([]);
    expect((await raw(proxy.url, { path: "/y" })).status).toBe(200);
    expect(proxy.seen.map((s) => [s.path, s.action])).toEqual([["/y", "forward"]]);
  });

  it("survives clients that go away mid-upload or mid-answer, and notes it", async () => {
    const echo = await echoServer();
    const proxy = await proxyTo(echo.url);
    // Half a body, then the client dies.
    await new Promise<void>((resolve) => {
      const req = request(`${proxy.url}/cut`, { method: "PUT", headers: { "Content-Length": "100" } });
      req.on("error", () => resolve());
      req.write("only half", () => setTimeout(() => req.destroy(), 50));
    });
    // A client that times out before its delayed answer.
    proxy.on({ path: "/late" }, { kind: "delay-answer", ms: 200 });
    await new Promise<void>((resolve) => {
      const req = request(`${proxy.url}/late`, { timeout: 50 });
      req.on("timeout", () => req.destroy());
      req.on("error", () => resolve());
      req.end();
    });
    await waitFor(() => proxy.seen.every((s) => s.error !== undefined), {
      what: "both noted",
      timeoutMs: 5_000,
    });
    expect(proxy.seen.map((s) => s.path)).toEqual(["/cut", "/late"]);
    // The store never took the cut-off request as whole.
    expect(echo.got.map((g) => g.url)).toEqual(["/late"]);
    expect((await raw(proxy.url, { path: "/still-serving" })).status).toBe(200);
  });
});

describe("chaos", () => {
  const actions = [
    { kind: "reset" },
    { kind: "drop-answer" },
    { kind: "duplicate" },
    { kind: "delay", ms: 5 },
    { kind: "hold" },
  ] as const;

  /** 40 GETs one after the other; what the proxy did with each and how often the store saw it. */
  async function run(proxy: HttpFaultProxy, echo: { got: Echoed[] }, seed: number) {
    proxy.clear();
    echo.got.length = 0;
    proxy.chaos({ seed, probability: 0.6, actions: [...actions], match: { method: "GET" }, holdMs: 20 });
    const answered: boolean[] = [];
    for (let i = 0; i < 40; i++) {
      answered.push(
        await raw(proxy.url, { path: `/c${i}` }).then(
          () => true,
          () => false,
        ),
      );
    }
    // A POST does not match: always forwarded.
    expect((await raw(proxy.url, { method: "POST", path: "/post" })).status).toBe(200);
    proxy.calm();
    const kinds = proxy.seen.slice(0, 40).map((s) => s.action);
    const reached = kinds.map((_, i) => echo.got.filter((g) => g.url === `/c${i}`).length);
    return { kinds, answered, reached };
  }

  it("the same seed replays the same actions; each does what it says", async () => {
    const echo = await echoServer();
    const proxy = await proxyTo(echo.url);
    const a = await run(proxy, echo, 7);
    const b = await run(proxy, echo, 7);
    const c = await run(proxy, echo, 8);
    expect(b.kinds).toEqual(a.kinds);
    expect(c.kinds).not.toEqual(a.kinds);
    for (const kind of ["forward", ...actions.map((x) => x.kind)]) expect(a.kinds).toContain(kind);
    for (const r of [a, c]) {
      r.kinds.forEach((kind, i) => {
        const expected = {
          forward: [true, 1],
          delay: [true, 1],
          hold: [true, 1],
          reset: [false, 0],
          "drop-answer": [false, 1],
          duplicate: [true, 2],
        }[kind as string];
        expect([r.answered[i], r.reached[i]], `request ${i}: ${kind}`).toEqual(expected);
      });
    }
  });

  it("calm() releases what chaos holds", async () => {
    const echo = await echoServer();
    const proxy = await proxyTo(echo.url);
    proxy.chaos({ seed: 1, probability: 1, actions: [{ kind: "hold" }], holdMs: 60_000 });
    const held = raw(proxy.url, { path: "/held" });
    await waitFor(() => proxy.seen.length === 1, { what: "the request seen" });
    await sleep(100);
    expect(echo.got).toHaveLength(0);
    proxy.calm();
    expect((await held).status).toBe(200);
    expect((await raw(proxy.url, { path: "/calm" })).status).toBe(200);
    expect(proxy.seen.map((s) => s.action)).toEqual(["hold", "forward"]);
  });
});
