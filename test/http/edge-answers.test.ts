import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startTestGateway, type TestGateway } from "../support/gateway.js";
import {
  expectS3Error,
  parseS3Error,
  rawRequest,
  signedRequest,
  signRequest,
} from "../support/signed-http.js";
import { type SocketAnswer, sendRaw } from "./raw-socket.js";

/**
 * Answers Node's HTTP server would give by itself (a bare 417 for an unknown Expect, a bare 400 for a
 * request without Host, a dropped connection for CONNECT, the adapter's bare 400 for a target it
 * cannot read) come in the endpoint's own form: S3 XML with a request id, or the lease API's JSON.
 */

let gw: TestGateway;
let host: string;

beforeAll(async () => {
  gw = await startTestGateway({ env: { FENCEGATE_DOMAIN: "s3.test" } });
  host = new URL(gw.url).host;
  expect((await signedRequest(gw.url, { method: "PUT", path: "/edge" })).status).toBe(200);
});

afterAll(async () => {
  await gw?.stop();
});

function expectXml(answer: SocketAnswer, code: string, status: number) {
  expect({ status: answer.status, body: answer.body.slice(0, 300) }).toMatchObject({ status });
  expect(answer.headers["content-type"]).toMatch(/xml/);
  const err = parseS3Error(answer.body);
  expect(err.Code).toBe(code);
  expect(answer.headers["x-amz-request-id"]).toMatch(/^[0-9A-F]{16}$/);
  expect(err.RequestId).toBe(answer.headers["x-amz-request-id"]);
}

function expectJson(
  answer: { status: number; headers: Record<string, unknown>; body: string },
  ...codes: string[]
) {
  expect(String(answer.headers["content-type"])).toMatch(/json/);
  const doc = JSON.parse(answer.body) as { error: { code: string } };
  expect(codes).toContain(doc.error.code);
  expect(String(answer.headers["x-amz-request-id"])).toMatch(/^[0-9A-F]{16}$/);
}

describe("answers Node would give by itself", () => {
  it("answers an unknown Expect with 417 ExpectationFailed in S3 XML, as S3 does", async () => {
    const req = await signRequest(gw.url, { method: "GET", path: "/edge" });
    const res = await rawRequest(gw.url, {
      ...req,
      headers: { ...(req.headers as Record<string, string>), expect: "something-else" },
    });
    expectS3Error(res, "ExpectationFailed", 417);
    expect(res.headers.connection).toBe("close");
  });

  it("answers HTTP/1.1 without Host with an S3 XML error and a request id", async () => {
    expectXml(await sendRaw(gw.url, "GET /edge HTTP/1.1\r\n\r\n"), "InvalidRequest", 400);
  });

  it("answers a repeated Host with an S3 XML error", async () => {
    const answer = await sendRaw(gw.url, `GET /edge HTTP/1.1\r\nHost: ${host}\r\nHost: evil.test\r\n\r\n`);
    expectXml(answer, "InvalidRequest", 400);
  });

  it("answers CONNECT with MethodNotAllowed instead of dropping the connection", async () => {
    expectXml(
      await sendRaw(gw.url, `CONNECT ${host} HTTP/1.1\r\nHost: ${host}\r\n\r\n`),
      "MethodNotAllowed",
      405,
    );
  });

  it("answers targets the HTTP adapter cannot read (backslash, bad Host, bad absolute form) in S3 XML", async () => {
    expectXml(await sendRaw(gw.url, `GET /edge/a\\b HTTP/1.1\r\nHost: ${host}\r\n\r\n`), "InvalidURI", 400);
    expectXml(await sendRaw(gw.url, "GET /edge HTTP/1.1\r\nHost: a b\r\n\r\n"), "InvalidArgument", 400);
    expectXml(
      await sendRaw(gw.url, `GET http://[x/edge HTTP/1.1\r\nHost: ${host}\r\n\r\n`),
      "InvalidURI",
      400,
    );
  });

  it("answers more header lines than Node keeps with RequestHeaderSectionTooLarge, not a silent cut", async () => {
    const lines = Array.from({ length: 2100 }, (_, i) => `a${i}:\r\n`).join("");
    const answer = await sendRaw(gw.url, `GET /edge HTTP/1.1\r\nHost: ${host}\r\n${lines}\r\n`);
    expectXml(answer, "RequestHeaderSectionTooLarge", 400);
  });

  it("answers Content-Length with Transfer-Encoding and an oversized header section in S3 XML", async () => {
    const smuggle = `PUT /edge/k HTTP/1.1\r\nHost: ${host}\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n`;
    expectXml(await sendRaw(gw.url, smuggle), "BadRequest", 400);
    const big = `GET /edge HTTP/1.1\r\nHost: ${host}\r\nX-Big: ${"b".repeat(20_000)}\r\n\r\n`;
    expectXml(await sendRaw(gw.url, big), "RequestHeaderSectionTooLarge", 400);
  });
});

describe("the lease API's namespace always answers JSON", () => {
  it("answers unknown endpoints and unauthenticated calls in JSON, however the path is spelt", async () => {
    for (const path of [
      "/_fence/v1",
      "/_fence/v1/",
      "/_fence/v1/nope",
      "/_fence/v2/leases",
      "//_fence/v1/leases",
      "/_fence%2Fv1/leases",
      "/%5Ffence/v1/leases",
    ]) {
      const res = await rawRequest(gw.url, { method: "GET", path });
      expect(res.status, path).toBeGreaterThanOrEqual(400);
      expectJson({ ...res, body: res.text }, "AccessDenied", "NotFound");
    }
  });

  it("answers refusals made before routing in JSON too", async () => {
    const noHost = await sendRaw(gw.url, "GET /_fence/v1/leases HTTP/1.1\r\n\r\n");
    expect(noHost.status).toBe(400);
    expectJson(noHost, "InvalidRequest");
    const big = await sendRaw(
      gw.url,
      `GET /_fence/v1/leases HTTP/1.1\r\nHost: ${host}\r\nX-Big: ${"b".repeat(20_000)}\r\n\r\n`,
    );
    expect(big.status).toBe(431);
    expectJson(big, "InvalidRequest");
    const backslash = await sendRaw(gw.url, `GET /_fence/v1/a\\b HTTP/1.1\r\nHost: ${host}\r\n\r\n`);
    expect(backslash.status).toBe(400);
    expectJson(backslash, "InvalidRequest");
    const connect = await sendRaw(gw.url, `CONNECT /_fence/v1 HTTP/1.1\r\nHost: ${host}\r\n\r\n`);
    expect(connect.status).toBe(405);
    expectJson(connect, "MethodNotAllowed");
  });

  it("leaves /_fence/ on a virtual-hosted bucket host to S3 (an object key there)", async () => {
    const res = await rawRequest(gw.url, {
      method: "GET",
      path: "/_fence/v1/leases",
      headers: { host: `edge.s3.test:${new URL(gw.url).port}` },
    });
    expect(res.status).toBe(403);
    expect(parseS3Error(res.text).Code).toBe("AccessDenied");
  });
});
