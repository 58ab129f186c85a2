/**
 * Object bodies leave the gateway by a direct pipe from the store's stream into the socket
 * (src/http/node-body.ts): whole objects and ranges arrive intact with every header the
 * middleware adds, stored header text goes out as the UTF-8 bytes it came in as, HEAD sends no
 * body, and a client that goes away in the middle of a body closes the object's file at once.
 */
import { randomBytes } from "node:crypto";
import { readdirSync, readlinkSync } from "node:fs";
import { connect } from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { md5Hex } from "../support/digest.js";
import { startTestGateway, type TestGateway } from "../support/gateway.js";
import { objectPath, rawRequest, signedRequest, signRequest } from "../support/signed-http.js";
import { waitFor } from "../support/wait.js";

let gw: TestGateway;
const bucket = "out";
const KEY = "big/object";
const body = randomBytes(8 * 1024 * 1024 + 17);

beforeAll(async () => {
  gw = await startTestGateway({ env: { FENCEGATE_FENCING: "optional" } });
  expect((await signedRequest(gw.url, { method: "PUT", path: `/${bucket}` })).status).toBe(200);
  const put = await signedRequest(gw.url, { method: "PUT", path: objectPath(bucket, KEY), body });
  expect(put.status, put.text).toBe(200);
});

afterAll(async () => {
  await gw?.stop();
});

/** Descriptors of this process that are open on files of the gateway's data directory. */
function openDataFiles(): string[] {
  const open: string[] = [];
  for (const fd of readdirSync("/proc/self/fd")) {
    try {
      const target = readlinkSync(`/proc/self/fd/${fd}`);
      if (target.startsWith(gw.dataDir) && !/\.(db|db-wal|db-shm|sqlite.*)$/.test(target)) open.push(target);
    } catch {
      // closed between the listing and the read
    }
  }
  return open;
}

describe("object bodies on the way out", () => {
  it("sends a whole object and a range intact, with the request id and server headers", async () => {
    const whole = await signedRequest(gw.url, { method: "GET", path: objectPath(bucket, KEY) });
    expect(whole.status).toBe(200);
    expect(whole.headers["content-length"]).toBe(String(body.length));
    expect(md5Hex(whole.body)).toBe(md5Hex(body));
    expect(whole.headers["x-amz-request-id"]).toMatch(/^[0-9A-F]{16}$/);
    expect(whole.headers.server).toBe("fencegate");
    expect(whole.headers).not.toHaveProperty("x-fencegate-node-body");

    const range = await signedRequest(gw.url, {
      method: "GET",
      path: objectPath(bucket, KEY),
      headers: { range: "bytes=1000000-1999999" },
    });
    expect(range.status).toBe(206);
    expect(range.headers["content-range"]).toBe(`bytes 1000000-1999999/${body.length}`);
    expect(range.body.equals(body.subarray(1_000_000, 2_000_000))).toBe(true);
  });

  it("answers HEAD with the object's length and no body", async () => {
    const head = await signedRequest(gw.url, { method: "HEAD", path: objectPath(bucket, KEY) });
    expect(head.status).toBe(200);
    expect(head.headers["content-length"]).toBe(String(body.length));
    expect(head.body.length).toBe(0);
  });

  it("sends stored header text of a large object as the UTF-8 bytes it arrived as", async () => {
    const disposition = 'attachment; filename="r\u00c3\u00a9sum\u00c3\u00a9.bin"'; // UTF-8 bytes as latin1
    const signed = await signRequest(gw.url, { method: "PUT", path: objectPath(bucket, "big/named"), body });
    const put = await rawRequest(gw.url, {
      ...signed,
      headers: { ...(signed.headers as Record<string, string>), "content-disposition": disposition },
    });
    expect(put.status).toBe(200);
    const got = await signedRequest(gw.url, { method: "GET", path: objectPath(bucket, "big/named") });
    expect(Buffer.from(String(got.headers["content-disposition"]), "latin1")).toEqual(
      Buffer.from(disposition, "latin1"),
    );
    expect(md5Hex(got.body)).toBe(md5Hex(body));
  });

  it("closes the object's file when the client goes away in the middle of the body", async () => {
    // Files of earlier answers close once their streams end.
    await waitFor(() => openDataFiles().length === 0, {
      what: "earlier answers' files to close",
      timeoutMs: 5_000,
    });
    const signed = await signRequest(gw.url, { method: "GET", path: objectPath(bucket, KEY) });
    const url = new URL(gw.url);
    const request = [
      `GET ${signed.path} HTTP/1.1`,
      ...Object.entries(signed.headers ?? {}).map(([k, v]) => `${k}: ${v}`),
      "",
      "",
    ].join("\r\n");
    let openWhileReading: string[] = [];
    const received = await new Promise<number>((resolve, reject) => {
      const socket = connect(Number(url.port), url.hostname, () => socket.write(request));
      let bytes = 0;
      socket.on("data", (d: Buffer) => {
        bytes += d.length;
        // Part of the body is in: the file is open and being read. Go away.
        if (bytes > 256 * 1024) {
          socket.pause();
          openWhileReading = openDataFiles();
          socket.destroy();
          resolve(bytes);
        }
      });
      socket.on("error", reject);
    });
    expect(received).toBeLessThan(body.length);
    expect(openWhileReading).toHaveLength(1);
    await waitFor(() => openDataFiles().length === 0, {
      what: "the object's file to close",
      timeoutMs: 5_000,
    });
    // And the gateway goes on serving.
    const again = await signedRequest(gw.url, { method: "GET", path: objectPath(bucket, KEY) });
    expect(md5Hex(again.body)).toBe(md5Hex(body));
  });
});
