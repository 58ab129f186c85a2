import { randomUUID } from "node:crypto";
import { createServer, type Server } from "node:http";
import type { AddressInfo, Socket } from "node:net";
import { DeleteObjectCommand } from "@aws-sdk/client-s3";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { createS3Backend, OutcomeUnknownError, type S3Backend } from "../../../src/backends/s3/index.js";
import { DomainError } from "../../../src/core/errors.js";
import { fencedCommit } from "../../../src/fence/commit.js";
import { metadataOf, readAll, verifiedBody } from "../../support/bodies.js";
import { startTestGateway } from "../../support/gateway.js";
import { expectS3Error, rawRequest, signedRequest } from "../../support/signed-http.js";
import { holdingHooks } from "./hold.js";
import { startProxy } from "./proxy.js";
import { backendOptions, recordName, type S3Fixture, s3Fixture } from "./s3-fixture.js";

/**
 * Store failures are S3 errors, never hangs: an unreachable or silent store is ServiceUnavailable
 * within the request time limit, throttling is SlowDown with the store's Retry-After, an abort
 * stops a GET, and a record PUT whose answer is lost is settled by reading the record again (our
 * nonce: committed) or reported as an unknown outcome (ServiceUnavailable, outcome "unknown").
 */

type Handler = Parameters<typeof createServer>[1];

async function listen(handler: Handler): Promise<{ url: string; server: Server; sockets: Set<Socket> }> {
  const server = createServer(handler);
  const sockets = new Set<Socket>();
  server.on("connection", (s) => {
    sockets.add(s);
    s.once("close", () => sockets.delete(s));
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, server, sockets };
}

async function close(s: { server: Server; sockets: Set<Socket> }) {
  for (const socket of s.sockets) socket.destroy();
  await new Promise<void>((resolve) => s.server.close(() => resolve()));
}

const opened: S3Backend[] = [];
const open = (url: string, extra: Parameters<typeof backendOptions>[1] = {}) => {
  const backend = createS3Backend(backendOptions(url, extra));
  opened.push(backend);
  return backend;
};

afterEach(async () => {
  for (const backend of opened.splice(0)) await backend.close();
});

const timed = async (promise: Promise<unknown>) => {
  const started = Date.now();
  const error = await promise.then(
    () => undefined,
    (e: unknown) => e,
  );
  return { error, ms: Date.now() - started };
};

describe("an unreachable or silent store", () => {
  it("answers ServiceUnavailable quickly when nothing listens", async () => {
    const gone = await listen(() => undefined);
    await close(gone);
    const backend = open(gone.url);
    for (const call of [
      () => backend.writeState("bucket", "k"),
      () => backend.listBuckets(),
      () =>
        backend.putObject(
          { bucket: "bucket", key: "k", body: verifiedBody("x"), metadata: metadataOf() },
          fencedCommit(1),
        ),
    ]) {
      const { error, ms } = await timed(call());
      expect(error).toBeInstanceOf(DomainError);
      expect(error).toMatchObject({ code: "ServiceUnavailable" });
      expect((error as Error).message).toContain(gone.url);
      expect(ms).toBeLessThan(5_000);
    }
  });

  it("answers ServiceUnavailable after the request time limit when the store never answers", async () => {
    const silent = await listen(() => undefined); // accepts, reads, never answers
    try {
      const backend = open(silent.url, { requestTimeoutMs: 300 });
      const { error, ms } = await timed(backend.headObject("bucket", "k"));
      expect(error).toMatchObject({ code: "ServiceUnavailable" });
      expect(ms).toBeLessThan(5_000);
    } finally {
      await close(silent);
    }
  });
});

describe("throttling", () => {
  let throttling: Awaited<ReturnType<typeof listen>>;
  let requests = 0;

  beforeAll(async () => {
    throttling = await listen((req, res) => {
      requests++;
      req.resume();
      // The gateway's health check lists buckets: that one call is answered, with no buckets.
      if (req.method === "GET" && req.url?.split("?")[0] === "/") {
        res.writeHead(200, { "content-type": "application/xml" });
        res.end(
          '<?xml version="1.0" encoding="UTF-8"?><ListAllMyBucketsResult><Buckets></Buckets></ListAllMyBucketsResult>',
        );
        return;
      }
      const slowDown = !req.url?.includes("too-many");
      res.writeHead(slowDown ? 503 : 429, { "content-type": "application/xml", "retry-after": "2" });
      res.end(
        `<?xml version="1.0" encoding="UTF-8"?><Error><Code>${slowDown ? "SlowDown" : "TooManyRequests"}</Code><Message>Please reduce your request rate.</Message></Error>`,
      );
    });
  });

  afterAll(async () => {
    await close(throttling);
  });

  it("maps 503 SlowDown and 429 to SlowDown with the store's Retry-After", async () => {
    const backend = open(throttling.url);
    await expect(backend.headObject("bucket", "k")).rejects.toMatchObject({
      code: "SlowDown",
      details: { retryAfterSeconds: 2 },
    });
    expect(requests).toBeGreaterThan(1); // the SDK retried first
    await expect(backend.headObject("too-many", "k")).rejects.toMatchObject({
      code: "SlowDown",
      details: { retryAfterSeconds: 2 },
    });
  });

  it("reaches the client: the gateway answers 503 SlowDown with the store's Retry-After", async () => {
    const gateway = await startTestGateway({
      env: {
        FENCEGATE_BACKEND: "s3",
        FENCEGATE_S3_ENDPOINT: throttling.url,
        FENCEGATE_S3_ACCESS_KEY_ID: "store-key",
        FENCEGATE_S3_SECRET_ACCESS_KEY: "store-secret",
        FENCEGATE_S3_FORCE_PATH_STYLE: "true",
        FENCEGATE_FENCING: "optional",
      },
    });
    try {
      const get = await signedRequest(gateway.url, { method: "GET", path: "/throttled/k" });
      expectS3Error(get, "SlowDown", 503);
      expect(get.headers["retry-after"]).toBe("2");
      const head = await signedRequest(gateway.url, { method: "HEAD", path: "/throttled/k" });
      expect(head.status).toBe(503);
      expect(head.headers["x-amz-error-code"]).toBe("SlowDown");
      expect(head.headers["retry-after"]).toBe("2");
      // An error without a retry hint carries no Retry-After.
      const bad = await rawRequest(gateway.url, { method: "GET", path: "/throttled/k" }); // unsigned
      expectS3Error(bad, "AccessDenied", 403);
      expect(bad.headers["retry-after"]).toBeUndefined();
    } finally {
      await gateway.stop();
    }
  });
});

describe("aborts and lost answers", () => {
  let fx: S3Fixture;
  let bucket: string;

  beforeAll(async () => {
    fx = await s3Fixture();
    bucket = `fg-err-${randomUUID().slice(0, 8)}`;
    await fx.backend.createBucket(bucket);
    await fx.backend.putObject(
      { bucket, key: "big", body: verifiedBody(Buffer.alloc(4 * 1024 * 1024, 7)), metadata: metadataOf() },
      fencedCommit(1),
    );
  });

  afterAll(async () => {
    await fx.cleanup();
  });

  it("an aborted signal aborts a GET, before the answer and while the body streams", async () => {
    const before = new AbortController();
    before.abort();
    await expect(fx.backend.getObject(bucket, "big", undefined, before.signal)).rejects.toThrow();

    const during = new AbortController();
    const got = await fx.backend.getObject(bucket, "big", undefined, during.signal);
    const reading = readAll(got.body);
    during.abort();
    await expect(reading).rejects.toThrow();
    expect(got.body.destroyed).toBe(true);
  });

  /** A proxy that breaks record PUTs: the first one's answer, the first one, or all of them. */
  const lossyProxy = (
    mode: "answer-lost" | "request-lost-once" | "request-lost-always",
    healed: () => boolean = () => false,
  ) => {
    let broken = 0;
    return startProxy(fx.store.url, (req, path) => {
      const isRecordPut = req.method === "PUT" && path.includes("/.fencegate/r/");
      if (!isRecordPut || healed() || (mode !== "request-lost-always" && broken > 0)) return "forward";
      broken++;
      return mode === "answer-lost" ? "lose-answer" : "lose-request";
    });
  };

  it("reads the record again when a record PUT's answer is lost: our nonce there means committed", async () => {
    const proxy = await lossyProxy("answer-lost");
    try {
      const backend = open(proxy.url);
      const put = await backend.putObject(
        { bucket, key: "lost-answer", body: verifiedBody("committed all the same"), metadata: metadataOf() },
        fencedCommit(5),
      );
      expect(put.highestToken).toBe(5);
      expect((await readAll((await fx.backend.getObject(bucket, "lost-answer")).body)).toString()).toBe(
        "committed all the same",
      );
    } finally {
      await proxy.close();
    }
  });

  it("sends a lost record PUT again while the record is unchanged: at most one copy can land", async () => {
    const proxy = await lossyProxy("request-lost-once");
    try {
      const backend = open(proxy.url);
      const put = await backend.putObject(
        {
          bucket,
          key: "lost-request",
          body: verifiedBody("sent twice, landed once"),
          metadata: metadataOf(),
        },
        fencedCommit(6),
      );
      expect(put.highestToken).toBe(6);
      expect((await readAll((await fx.backend.getObject(bucket, "lost-request")).body)).toString()).toBe(
        "sent twice, landed once",
      );
    } finally {
      await proxy.close();
    }
  });

  it("reports an unknown outcome (ServiceUnavailable, never a refusal) when no record PUT gets through", async () => {
    await fx.backend.putObject(
      { bucket, key: "unknown", body: verifiedBody("before"), metadata: metadataOf() },
      fencedCommit(1),
    );
    let healed = false;
    const proxy = await lossyProxy("request-lost-always", () => healed);
    try {
      const backend = open(proxy.url);
      const failed = backend.putObject(
        { bucket, key: "unknown", body: verifiedBody("maybe"), metadata: metadataOf() },
        fencedCommit(2),
      );
      const error = await failed.then(
        () => undefined,
        (e: unknown) => e,
      );
      expect(error).toBeInstanceOf(OutcomeUnknownError);
      expect(error).toMatchObject({ code: "ServiceUnavailable", details: { outcome: "unknown" } });
      // Once record PUTs get through, the outcome is learnt: the record is unchanged, so the same
      // state is written again under a new write id, after which the lost PUT can never land.
      healed = true;
      await expect((error as OutcomeUnknownError).settle()).resolves.toBe("not-landed");
      expect((await readAll((await fx.backend.getObject(bucket, "unknown")).body)).toString()).toBe("before");
      // The blob of the unknown write was kept (it might have been committed); the collector decides.
      expect(await fx.leftovers()).toHaveLength(1);
      await fx.current().collectGarbage({ graceMs: 0 });
      expect(await fx.leftovers()).toEqual([]);
    } finally {
      await proxy.close();
    }
  });

  it("refuses with IncompleteBody when the request goes away during the body", async () => {
    const controller = new AbortController();
    const body = verifiedBody(Buffer.alloc(12 * 1024 * 1024, 1), {}, 1024 * 1024);
    body.stream.once("data", () => controller.abort());
    await expect(
      fx.backend.putObject(
        { bucket, key: "abandoned", body, metadata: metadataOf() },
        fencedCommit(3, { signal: controller.signal }),
      ),
    ).rejects.toMatchObject({ code: "IncompleteBody" });
    await expect(fx.backend.headObject(bucket, "abandoned")).rejects.toMatchObject({ code: "NoSuchKey" });
    expect(await fx.leftovers()).toEqual([]);
  });

  it("takes a record that vanished under a commit (S3 answers If-Match with 404) as a lost race", async () => {
    await fx.backend.putObject(
      { bucket, key: "vanishing", body: verifiedBody("first"), metadata: metadataOf() },
      fencedCommit(null),
    );
    const held = holdingHooks();
    const writer = fx.another({ hooks: held.hooks });
    const hold = held.hold("vanishing", "before-record-put");
    const write = writer.putObject(
      { bucket, key: "vanishing", body: verifiedBody("second"), metadata: metadataOf() },
      fencedCommit(null),
    );
    await hold.reached;
    // Removed behind fencegate's back (an operator's mistake): the conditional PUT finds nothing.
    await fx.raw.send(new DeleteObjectCommand({ Bucket: bucket, Key: recordName("vanishing") }));
    hold.release();
    await write;
    expect((await readAll((await fx.backend.getObject(bucket, "vanishing")).body)).toString()).toBe("second");
  });
});
