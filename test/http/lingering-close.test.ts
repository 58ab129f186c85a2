import { connect } from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startTestGateway, type TestGateway } from "../support/gateway.js";
import { parseS3Error, rawRequest, signRequest } from "../support/signed-http.js";
import { sleep } from "../support/wait.js";
import { parseAnswer, type SocketAnswer } from "./raw-socket.js";

/**
 * An answer given before the request body was read to its end (a body over an operation's limit,
 * a write refused before its body is needed) reaches a client that is still sending: the gateway
 * reads and discards the rest of the body before it closes the connection, instead of closing
 * it under the client's writes, which the kernel answers with a reset that takes the unread
 * answer with it (the client sees EPIPE or ECONNRESET, never the S3 error).
 */

let gw: TestGateway;
/** Larger than the kernel buffers of a loopback connection: the client is still writing when answered. */
const BODY = Buffer.from(`<AccessControlPolicy>${"<x>y</x>".repeat(3_000_000)}</AccessControlPolicy>`);

beforeAll(async () => {
  gw = await startTestGateway();
  const created = await rawRequest(gw.url, await signRequest(gw.url, { method: "PUT", path: "/linger" }));
  expect(created.status).toBe(200);
});

afterAll(async () => {
  await gw?.stop();
});

/**
 * Sends the request head and its whole body, and only then (after `readAfterMs`) starts reading:
 * a client whose answer sits unread while it is still writing.
 */
async function sendThenRead(
  head: string,
  body: Buffer,
  readAfterMs: number,
): Promise<SocketAnswer & { error?: string }> {
  const url = new URL(gw.url);
  const socket = connect(Number(url.port), url.hostname);
  socket.pause();
  let error: string | undefined;
  socket.on("error", (e: NodeJS.ErrnoException) => {
    error ??= e.code ?? e.message;
  });
  await new Promise<void>((resolve) => socket.once("connect", resolve));
  socket.write(head);
  socket.write(body);
  await sleep(readAfterMs);
  const chunks: Buffer[] = [];
  socket.on("data", (d: Buffer) => chunks.push(d));
  socket.resume();
  await new Promise<void>((resolve) => {
    socket.once("close", () => resolve());
    setTimeout(() => {
      socket.destroy();
      resolve();
    }, 10_000).unref();
  });
  const answer = parseAnswer(Buffer.concat(chunks), true);
  return error === undefined ? answer : { ...answer, error };
}

async function aclHead(extra: Record<string, string>): Promise<string> {
  const req = await signRequest(gw.url, {
    method: "PUT",
    path: "/linger",
    query: { acl: "" },
    body: BODY,
    headers: extra,
  });
  let head = `PUT ${req.path} HTTP/1.1\r\n`;
  for (const [name, value] of Object.entries(req.headers ?? {})) head += `${name}: ${value}\r\n`;
  return `${head}\r\n`;
}

describe("lingering close", () => {
  it("a Connection: close client reads the S3 error of an oversized body it was still sending", async () => {
    const answer = await sendThenRead(await aclHead({ connection: "close" }), BODY, 500);
    expect({ status: answer.status, error: answer.error }).toEqual({ status: 400, error: undefined });
    expect(parseS3Error(answer.body).Code).toBe("MaxMessageLengthExceeded");
    expect(answer.headers.connection).toBe("close");
  });

  it("a keep-alive client gets its answer and the connection serves the next request", async () => {
    const next = await signRequest(gw.url, { method: "GET", path: "/linger", query: { acl: "" } });
    let nextHead = `GET ${next.path} HTTP/1.1\r\n`;
    for (const [name, value] of Object.entries(next.headers ?? {})) nextHead += `${name}: ${value}\r\n`;
    nextHead += "connection: close\r\n\r\n";
    const answer = await sendThenRead(await aclHead({}), Buffer.concat([BODY, Buffer.from(nextHead)]), 500);
    expect(answer.error).toBeUndefined();
    expect(answer.status).toBe(400);
    // The second answer, on the same connection, follows the first.
    const second = answer.body.indexOf("HTTP/1.1 200 OK");
    expect(second, answer.body.slice(0, 600)).toBeGreaterThan(0);
    expect(answer.body.slice(second)).toContain("<AccessControlPolicy");
  });

  it("answers twenty oversized bodies in a row with MaxMessageLengthExceeded, never a reset", async () => {
    const body = BODY.subarray(0, 3 * 1024 * 1024);
    const outcomes: string[] = [];
    for (let i = 0; i < 20; i++) {
      const req = await signRequest(gw.url, { method: "PUT", path: "/linger", query: { acl: "" }, body });
      try {
        const res = await rawRequest(gw.url, req);
        outcomes.push(`${res.status} ${parseS3Error(res.text).Code}`);
      } catch (e) {
        outcomes.push(String((e as NodeJS.ErrnoException).code ?? e));
      }
    }
    expect(outcomes).toEqual(Array(20).fill("400 MaxMessageLengthExceeded"));
  });
});
