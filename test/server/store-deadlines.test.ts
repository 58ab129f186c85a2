/**
 * requestTimeoutMs bounds a whole store call, the SDK's own retries and their backoff included
 * (S3 through the real AWS SDK against HTTP servers that stall or throttle; Azure through
 * AzureCalls), a deadline's error says "no answer in time" and keeps its cause, and a body download
 * is bounded by its idle time instead: it may stream for as long as it moves.
 */
import { createServer, type IncomingMessage, type ServerResponse } from "node:http";
import type { AddressInfo, Socket } from "node:net";
import { Readable } from "node:stream";
import { afterEach, describe, expect, it } from "vitest";
import { AzureCalls } from "../../src/backends/azure/azure-calls.js";
import { Store } from "../../src/backends/s3/store.js";
import { DomainError } from "../../src/core/errors.js";
import { CREDENTIALS } from "../support/gateway.js";
import { sleep } from "../support/wait.js";

const cleanups: Array<() => Promise<void> | void> = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

/** An HTTP server on 127.0.0.1:0 answering with `handler`; closed (its sockets cut) after the test. */
async function serve(handler: (req: IncomingMessage, res: ServerResponse) => void): Promise<string> {
  const server = createServer(handler);
  const sockets = new Set<Socket>();
  server.on("connection", (s) => {
    sockets.add(s);
    s.once("close", () => sockets.delete(s));
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  cleanups.push(
    () =>
      new Promise<void>((resolve) => {
        for (const s of sockets) s.destroy();
        server.close(() => resolve());
      }),
  );
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
}

function storeAt(endpoint: string, requestTimeoutMs: number): Store {
  const store = new Store({
    endpoint,
    region: "us-east-1",
    credentials: CREDENTIALS,
    forcePathStyle: true,
    requestTimeoutMs,
  });
  cleanups.push(() => store.destroy());
  return store;
}

const timed = async (work: Promise<unknown>) => {
  const started = performance.now();
  const outcome = await work.then(
    (value) => ({ value, error: undefined as unknown }),
    (error: unknown) => ({ value: undefined, error }),
  );
  return { ...outcome, ms: performance.now() - started };
};

/** Room for an abort to propagate on a busy machine; the SDK's three attempts need far more. */
const MARGIN_MS = 700;

describe("an S3 store call", () => {
  const LIMIT_MS = 1_000;

  it("ends within requestTimeoutMs when the store never answers, with 503 that says no answer in time", async () => {
    let requests = 0;
    const url = await serve(() => {
      requests++; // read, never answered
    });
    const { error, ms } = await timed(storeAt(url, LIMIT_MS).getText("bkt", "k"));
    expect(error).toBeInstanceOf(DomainError);
    expect(error).toMatchObject({ code: "ServiceUnavailable" });
    expect((error as Error).message).toMatch(/no answer in time/);
    // The deadline's error is kept as the cause, with what the SDK raised under it.
    const cause = (error as Error).cause as Error;
    expect(cause).toMatchObject({ name: "TimeoutError", message: `no answer in time (${LIMIT_MS} ms)` });
    expect(ms).toBeGreaterThanOrEqual(LIMIT_MS - 50);
    expect(ms).toBeLessThan(LIMIT_MS + MARGIN_MS);
    expect(requests).toBe(1);
  });

  it("ends within requestTimeoutMs while the SDK retries a throttling store and backs off", async () => {
    let requests = 0;
    const url = await serve((req, res) => {
      requests++;
      req.resume();
      res.writeHead(503, { "content-type": "application/xml", "retry-after": "1" });
      res.end(
        '<?xml version="1.0" encoding="UTF-8"?><Error><Code>SlowDown</Code><Message>Please reduce your request rate.</Message></Error>',
      );
    });
    const { error, ms } = await timed(storeAt(url, LIMIT_MS).head("bkt", "k"));
    expect(error).toBeInstanceOf(DomainError);
    expect(["ServiceUnavailable", "SlowDown"]).toContain((error as DomainError).code);
    expect(requests).toBeGreaterThanOrEqual(1);
    expect(ms).toBeLessThan(LIMIT_MS + MARGIN_MS);
  });

  it("leaves a conditional write that got no answer in time unknown, its error saying so", async () => {
    const url = await serve(() => undefined);
    const started = performance.now();
    const put = await storeAt(url, LIMIT_MS).putConditional("bkt", "r", {
      body: Buffer.from("{}"),
      ifNoneMatch: "*",
    });
    expect(performance.now() - started).toBeLessThan(LIMIT_MS + MARGIN_MS);
    expect(put.outcome).toBe("unknown");
    const error = (put as { error: Error }).error;
    expect(`${error.message} ${(error.cause as Error | undefined)?.message}`).toMatch(/no answer in time/);
  });

  it("streams a body for longer than requestTimeoutMs while it moves, and stops one that stalls", async () => {
    const CHUNK = Buffer.alloc(1024, 7);
    const url = await serve((req, res) => {
      req.resume();
      const stall = req.url?.includes("stall") === true;
      res.writeHead(200, { "content-length": String(CHUNK.length * 6), etag: '"e"' });
      let sent = 0;
      const next = () => {
        res.write(CHUNK);
        sent++;
        // A chunk every 300 ms: 1.5 s in all, with a limit of 500 ms of silence.
        if (sent < 6 && !(stall && sent === 2)) setTimeout(next, 300);
        else if (sent === 6) res.end();
      };
      next();
    });
    const store = storeAt(url, 500);
    const moving = await store.getStream("bkt", "moving");
    const started = performance.now();
    let bytes = 0;
    for await (const chunk of moving!.body) bytes += (chunk as Buffer).length;
    expect(bytes).toBe(CHUNK.length * 6);
    expect(performance.now() - started).toBeGreaterThan(1_000);

    const stalled = await store.getStream("bkt", "stall");
    const read = timed(
      (async () => {
        for await (const _chunk of stalled!.body) {
          // read until it fails
        }
      })(),
    );
    const { error, ms } = await read;
    expect(error).toBeInstanceOf(Error);
    // Two chunks 300 ms apart, then 500 ms of silence.
    expect(ms).toBeLessThan(300 + 500 + MARGIN_MS);
  });
});

describe("an Azure call (AzureCalls)", () => {
  const LIMIT_MS = 300;

  it("ends at its deadline even when the SDK does not react to the abort", async () => {
    const calls = new AzureCalls(LIMIT_MS);
    // A call that ignores its abort signal, as a retry policy's backoff or a credential lookup may.
    const { error, ms } = await timed(
      calls.run("get blob b/k", undefined, () => new Promise(() => undefined)),
    );
    expect(error).toMatchObject({ code: "ServiceUnavailable" });
    expect((error as Error).message).toMatch(/^no answer in time: .*within 300 ms \(get blob b\/k\)/);
    expect((error as Error).cause).toBeInstanceOf(Error);
    expect(ms).toBeGreaterThanOrEqual(LIMIT_MS - 20);
    expect(ms).toBeLessThan(LIMIT_MS + MARGIN_MS);
  });

  it("lets a body stream for as long as it moves, stops it once it stalls, and never blames a slow reader", async () => {
    const calls = new AzureCalls(LIMIT_MS);
    /** A body that sends `chunks` chunks 100 ms apart, then nothing more (`end`: or ends). */
    const body = (chunks: number, end: boolean) =>
      calls.runStream(
        "get b/k",
        undefined,
        async (_signal, onProgress) => {
          let sent = 0;
          const stream = new Readable({ read() {}, highWaterMark: 1024 });
          const next = () => {
            if (sent === chunks) {
              if (end) stream.push(null);
              return;
            }
            sent++;
            stream.push(Buffer.alloc(512, 1));
            onProgress();
            setTimeout(next, 100);
          };
          next();
          return { body: stream };
        },
        (answer) => answer.body,
      );

    // Ten chunks, a second in all: three times the limit, but never 300 ms without a byte.
    const moving = await body(10, true);
    let bytes = 0;
    for await (const chunk of moving.body) bytes += (chunk as Buffer).length;
    expect(bytes).toBe(5120);

    const stalled = await body(2, false);
    const { error, ms } = await timed(
      (async () => {
        for await (const _chunk of stalled.body) {
          // read until it fails
        }
      })(),
    );
    expect(error).toMatchObject({ code: "ServiceUnavailable" });
    expect((error as Error).message).toMatch(/no answer in time/);
    expect(ms).toBeLessThan(100 + LIMIT_MS + MARGIN_MS);

    // Nobody reads this one: its buffer fills, which is the reader's doing, not the store's.
    const unread = await body(4, false);
    await sleep(LIMIT_MS * 3);
    expect(unread.body.destroyed).toBe(false);
    unread.body.destroy();
  });
});
