import { createHash } from "node:crypto";
import { request as httpRequest } from "node:http";
import { Sha256 } from "@aws-crypto/sha256-js";
import { SignatureV4 } from "@smithy/signature-v4";
import { XMLParser } from "fast-xml-parser";
import { expect } from "vitest";
import { CREDENTIALS } from "../support/gateway.js";

/** Raw HTTP helpers for the integration suites: exact paths, exact headers, exact bodies. */

export type RawResponse = {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  body: Buffer;
  text: string;
};

export type RawRequest = {
  method: string;
  /** The request target exactly as it goes on the wire (path and query, already encoded). */
  path: string;
  headers?: Record<string, string | string[]>;
  body?: Buffer | string;
};

/** Sends one request with node:http, which (unlike fetch) leaves the path and headers alone. */
export function rawRequest(endpoint: string, req: RawRequest): Promise<RawResponse> {
  const url = new URL(endpoint);
  return new Promise((resolve, reject) => {
    const r = httpRequest(
      {
        host: url.hostname,
        port: Number(url.port),
        method: req.method,
        path: req.path,
        headers: req.headers,
        agent: false,
      },
      (res) => {
        const chunks: Buffer[] = [];
        res.on("data", (c: Buffer) => chunks.push(c));
        res.on("error", reject);
        res.on("end", () => {
          const body = Buffer.concat(chunks);
          resolve({ status: res.statusCode ?? 0, headers: res.headers, body, text: body.toString("utf8") });
        });
      },
    );
    r.on("error", reject);
    if (req.body !== undefined) r.write(req.body);
    r.end();
  });
}

/** AWS's URI encoding (RFC 3986 unreserved characters stay as they are). */
export function awsEncode(s: string): string {
  return encodeURIComponent(s).replace(/[!'()*]/g, (c) => `%${c.charCodeAt(0).toString(16).toUpperCase()}`);
}

/** `/bucket/key` with each key segment encoded as the SDK does. */
export function objectPath(bucket: string, key: string): string {
  return `/${bucket}/${key.split("/").map(awsEncode).join("/")}`;
}

export type Credentials = { accessKeyId: string; secretAccessKey: string };

function signerFor(credentials: Credentials = CREDENTIALS): SignatureV4 {
  return new SignatureV4({
    service: "s3",
    region: "us-east-1",
    credentials,
    sha256: Sha256,
    uriEscapePath: false,
    applyChecksum: false,
  });
}

export type SignedRequest = {
  method: string;
  /** Raw (already encoded) path, signed exactly as given. */
  path: string;
  query?: Record<string, string>;
  headers?: Record<string, string>;
  body?: Buffer | string;
  /** x-amz-content-sha256; default: the hex SHA-256 of the body. */
  payloadHash?: string;
  credentials?: Credentials;
  signingDate?: Date;
};

function queryString(query: Record<string, string | string[] | null | undefined>): string {
  const parts: string[] = [];
  for (const [k, v] of Object.entries(query)) {
    if (v === undefined || v === null) continue;
    for (const one of Array.isArray(v) ? v : [v]) parts.push(`${awsEncode(k)}=${awsEncode(one)}`);
  }
  return parts.length > 0 ? `?${parts.join("&")}` : "";
}

/** Signs with the Authorization header (SigV4, service s3) and returns what to send. */
export async function signRequest(endpoint: string, req: SignedRequest): Promise<RawRequest> {
  const url = new URL(endpoint);
  const body = req.body === undefined ? undefined : Buffer.from(req.body);
  const payloadHash = req.payloadHash ?? sha256Hex(body ?? "");
  const headers: Record<string, string> = {
    host: url.host,
    "x-amz-content-sha256": payloadHash,
    ...(body !== undefined ? { "content-length": String(body.length) } : {}),
    ...req.headers,
  };
  const signed = await signerFor(req.credentials).sign(
    {
      method: req.method,
      protocol: url.protocol,
      hostname: url.hostname,
      port: Number(url.port),
      path: req.path,
      query: req.query ?? {},
      headers,
    },
    { signingDate: req.signingDate ?? new Date() },
  );
  return {
    method: req.method,
    path: req.path + queryString(req.query ?? {}),
    headers: signed.headers as Record<string, string>,
    ...(body !== undefined ? { body } : {}),
  };
}

export async function signedRequest(endpoint: string, req: SignedRequest): Promise<RawResponse> {
  return rawRequest(endpoint, await signRequest(endpoint, req));
}

/** A presigned URL's path and query (the gateway's host is signed). */
export async function presign(
  endpoint: string,
  req: {
    method: string;
    path: string;
    query?: Record<string, string>;
    expiresIn?: number;
    signingDate?: Date;
    credentials?: Credentials;
  },
): Promise<string> {
  const url = new URL(endpoint);
  const signed = await signerFor(req.credentials).presign(
    {
      method: req.method,
      protocol: url.protocol,
      hostname: url.hostname,
      port: Number(url.port),
      path: req.path,
      query: req.query ?? {},
      // As @aws-sdk/s3-request-presigner does: the payload is unsigned (hoisted into the query).
      headers: { host: url.host, "x-amz-content-sha256": "UNSIGNED-PAYLOAD" },
    },
    { expiresIn: req.expiresIn ?? 300, signingDate: req.signingDate ?? new Date() },
  );
  return req.path + queryString(signed.query as Record<string, string>);
}

const xml = new XMLParser({ parseTagValue: false });

export type S3ErrorBody = { Code: string; Message: string; Resource: string; RequestId: string };

/** Parses an S3 error document; fails the test when the body is not one. */
export function parseS3Error(text: string): S3ErrorBody & Record<string, unknown> {
  const doc = xml.parse(text) as { Error?: Record<string, unknown> };
  expect(doc.Error, `not an S3 error document: ${text.slice(0, 300)}`).toBeDefined();
  return doc.Error as S3ErrorBody & Record<string, unknown>;
}

/**
 * The response is an S3 error with this code and status: XML with Code, Message, Resource and
 * RequestId, the RequestId equal to the x-amz-request-id header.
 */
export function expectS3Error(res: RawResponse, code: string, status: number): S3ErrorBody {
  expect({ status: res.status, body: res.text.slice(0, 500) }).toMatchObject({ status });
  expect(String(res.headers["content-type"])).toMatch(/xml/);
  const err = parseS3Error(res.text);
  expect(err.Code).toBe(code);
  expect(typeof err.Message).toBe("string");
  expect(err.Message.length).toBeGreaterThan(0);
  expect(err).toHaveProperty("Resource");
  const requestId = res.headers["x-amz-request-id"];
  expect(typeof requestId).toBe("string");
  expect(err.RequestId).toBe(requestId);
  return err;
}

export function sha256Hex(data: Buffer | string): string {
  return createHash("sha256").update(data).digest("hex");
}

export function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}
