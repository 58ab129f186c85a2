import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { closedWithin, openSocket } from "../../http/raw-socket.js";
import { startTestGateway, type TestGateway } from "../../support/gateway.js";
import { objectPath, signedRequest } from "../../support/signed-http.js";
import { sleep } from "../../support/wait.js";

/**
 * The slowloris case of the hostile-input run, with the default configuration (no timeout set):
 * 50 clients that keep sending header lines and never finish are cut well before 20 s, and a
 * normal request is served within a second all along.
 */

const bucket = "slowloris";
const HOLD_MS = 20_000;
let gw: TestGateway;

beforeAll(async () => {
  gw = await startTestGateway({ env: { FENCEGATE_FENCING: "optional" } });
  expect((await signedRequest(gw.url, { method: "PUT", path: `/${bucket}` })).status).toBe(200);
  const put = await signedRequest(gw.url, { method: "PUT", path: objectPath(bucket, "k"), body: "served" });
  expect(put.status).toBe(200);
});

afterAll(async () => {
  await gw?.stop();
});

describe("slowloris clients with the default timeouts", () => {
  it("cuts 50 connections that never finish their headers well before 20 s, serving others meanwhile", async () => {
    const host = new URL(gw.url).host;
    const sockets = await Promise.all(Array.from({ length: 50 }, () => openSocket(gw.url)));
    for (const s of sockets) {
      s.on("error", () => undefined);
      s.write(`GET /${bucket} HTTP/1.1\r\nHost: ${host}\r\n`);
    }
    const drip = setInterval(() => {
      for (const s of sockets) if (s.writable) s.write("X-Drip: 1\r\n");
    }, 500);
    try {
      const closed = Promise.all(sockets.map(closedWithin));
      let allClosed = false;
      void closed.then(() => {
        allClosed = true;
      });
      const started = Date.now();
      const served: number[] = [];
      // A normal request every second until the slow clients are gone (or the 20 s are up).
      while (!allClosed && Date.now() - started < HOLD_MS) {
        const t = Date.now();
        const res = await signedRequest(gw.url, { method: "GET", path: objectPath(bucket, "k") });
        expect(res.text).toBe("served");
        served.push(Date.now() - t);
        await sleep(1_000);
      }
      expect(allClosed, "every slowloris connection was cut within 20 s").toBe(true);
      // Cut by the default header timeout (10 s), checked at most a second late.
      expect(Math.max(...(await closed))).toBeLessThan(12_500);
      expect(served.length).toBeGreaterThanOrEqual(8);
      expect(Math.max(...served)).toBeLessThan(1_000);
    } finally {
      clearInterval(drip);
      for (const s of sockets) s.destroy();
    }
  }, 40_000);
});
