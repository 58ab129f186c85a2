/**
 * The pipe of an object body into the socket (src/http/node-body.ts), on a bare Node server: a
 * store stream that fails in the middle cuts the answer short (the client sees fewer bytes than
 * Content-Length and a broken connection), instead of leaving it hanging or looking complete.
 */
import { createServer, get, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { Readable } from "node:stream";
import { afterEach, describe, expect, it } from "vitest";
import { nodeBodyResponse, sendNodeBody } from "../../src/http/node-body.js";

let server: Server | undefined;

afterEach(async () => {
  await new Promise<void>((resolve) => (server ? server.close(() => resolve()) : resolve()));
  server = undefined;
});

describe("sendNodeBody", () => {
  it("cuts the answer short when the body's stream fails midway", async () => {
    let source: Readable | undefined;
    server = createServer((_req, res) => {
      let sent = 0;
      source = new Readable({
        read() {
          if (sent < 300) {
            sent += 100;
            this.push(Buffer.alloc(100, 1));
          } else this.destroy(new Error("EIO: the disk failed"));
        },
      });
      const headers = new Headers({ "content-length": "1000" });
      sendNodeBody(nodeBodyResponse(res, source, 200, headers), res);
    });
    await new Promise<void>((resolve) => server!.listen(0, "127.0.0.1", resolve));
    const { port } = server.address() as AddressInfo;
    const outcome = await new Promise<{ status: number; bytes: number; broken: boolean }>((resolve) => {
      get({ host: "127.0.0.1", port, path: "/" }, (res) => {
        let bytes = 0;
        res.on("data", (d: Buffer) => {
          bytes += d.length;
        });
        res.on("error", () => resolve({ status: res.statusCode!, bytes, broken: true }));
        res.on("end", () => resolve({ status: res.statusCode!, bytes, broken: !res.complete }));
      }).on("error", () => resolve({ status: 0, bytes: 0, broken: true }));
    });
    expect(outcome.status).toBe(200);
    expect(outcome.bytes).toBeLessThan(1000);
    expect(outcome.broken).toBe(true);
    expect(source!.destroyed).toBe(true);
  });
});
