import { createHmac } from "node:crypto";
import { request as httpRequest } from "node:http";
import { Sha256 } from "@aws-crypto/sha256-js";
import { SignatureV4 } from "@smithy/signature-v4";
import { XMLParser } from "fast-xml-parser";
import { expect } from "vitest";
import { sha256Hex } from "./digest.js";
import { CREDENTIALS } from "./gateway.js";
import { rawResponseObservers } from "./raw-observers.js";

/**
 * Raw HTTP helpers for the integration suites: exact paths, exact headers, exact bodies, signed
 * with SigV4 by the one signer of the tests (sigV4Signer, @smithy/signature-v4 configured as the
 * S3 client configures it) or, for aws-chunked bodies, by an independent chunk signer written
 * from the AWS documentation (signedChunkedBody).
 */

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
          const answer = {
            status: res.statusCode ?? 0,
            headers: res.headers,
            body,
            text: body.toString("utf8"),
          };
          for (const observe of rawResponseObservers) {
            observe({ ...req, responseHeaders: res.headers, status: answer.status, text: answer.text });
          }
          resolve(answer);
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

/**
 * The SigV4 signer every test signs with: @smithy/signature-v4 as the S3 client configures it
 * (path not re-escaped, no payload checksum added). Defaults: the gateway's development
 * credentials, us-east-1, service s3.
 */
export function sigV4Signer(
  opts: { credentials?: Credentials; region?: string; service?: string } = {},
): SignatureV4 {
  return new SignatureV4({
    service: opts.service ?? "s3",
    region: opts.region ?? "us-east-1",
    credentials: opts.credentials ?? CREDENTIALS,
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

/** A query as the SDK puts it on the wire: `k=v&k2=v2`, AWS-encoded, in the given order. */
export function wireQuery(query: Record<string, string | string[] | null | undefined>): string {
  const parts: string[] = [];
  for (const [k, v] of Object.entries(query)) {
    if (v === undefined || v === null) continue;
    for (const one of Array.isArray(v) ? v : [v]) parts.push(`${awsEncode(k)}=${awsEncode(one)}`);
  }
  return parts.join("&");
}

function queryString(query: Record<string, string | string[] | null | undefined>): string {
  const wire = wireQuery(query);
  return wire === "" ? "" : `?${wire}`;
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
  const signed = await sigV4Signer({ credentials: req.credentials }).sign(
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
  const signed = await sigV4Signer({ credentials: req.credentials }).presign(
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

// ---- aws-chunked bodies: an independent chunk signer, written from the AWS documentation ----

const hmac = (key: Buffer | string, data: string) => createHmac("sha256", key).update(data).digest();

/** The SigV4 signing key of a secret for one date (YYYYMMDD), region and service. */
export function signingKey(secret: string, date: string, region = "us-east-1", service = "s3"): Buffer {
  return hmac(hmac(hmac(hmac(`AWS4${secret}`, date), region), service), "aws4_request");
}

/** HMAC-SHA256 of a string to sign with a signing key, hex: a SigV4 signature. */
export function signatureOf(key: Buffer, stringToSign: string): string {
  return hmac(key, stringToSign).toString("hex");
}

/** What signing the chunks of a body takes: the key, the request's date, scope and seed signature. */
export type ChunkSigner = { key: Buffer; amzDate: string; scope: string; seed: string };

/** The chunk signer of a request signed by signRequest (its Authorization and x-amz-date headers). */
export function chunkSignerOf(
  headers: Record<string, string | string[] | undefined>,
  secret: string = CREDENTIALS.secretAccessKey,
): ChunkSigner {
  const auth = String(headers.authorization);
  const seed = /Signature=([0-9a-f]{64})/.exec(auth)?.[1];
  const scope = /Credential=[^/]+\/([^,]+)/.exec(auth)?.[1];
  if (seed === undefined || scope === undefined) throw new Error(`not a SigV4 Authorization: ${auth}`);
  const [date = "", region, service] = scope.split("/");
  return {
    key: signingKey(secret, date, region, service),
    amzDate: String(headers["x-amz-date"]),
    scope,
    seed,
  };
}

/** `payload` cut into pieces of `size` bytes (none for an empty payload). */
export function splitEvery(payload: Buffer, size: number): Buffer[] {
  const pieces: Buffer[] = [];
  for (let at = 0; at < payload.length; at += size) pieces.push(payload.subarray(at, at + size));
  return pieces;
}

/**
 * A STREAMING-AWS4-HMAC-SHA256-PAYLOAD body: `<hex>;chunk-signature=<sig>\r\n<data>\r\n` for each
 * chunk, the final zero-length chunk, and the signed trailer when given. `tamper` changes the
 * bytes sent for a chunk after it was signed. Returns the body and every signature in order.
 */
export function signedChunkedBody(
  chunks: Buffer[],
  s: ChunkSigner,
  opts: { trailer?: { name: string; value: string }; tamper?: (data: Buffer) => Buffer } = {},
): { body: Buffer; signatures: string[] } {
  const parts: Buffer[] = [];
  const signatures: string[] = [];
  let previous = s.seed;
  const sign = (data: Buffer) => {
    const sts = [
      "AWS4-HMAC-SHA256-PAYLOAD",
      s.amzDate,
      s.scope,
      previous,
      sha256Hex(""),
      sha256Hex(data),
    ].join("\n");
    previous = signatureOf(s.key, sts);
    signatures.push(previous);
    return previous;
  };
  for (const data of chunks) {
    const sent = opts.tamper ? opts.tamper(data) : data;
    parts.push(
      Buffer.from(`${data.length.toString(16)};chunk-signature=${sign(data)}\r\n`),
      sent,
      Buffer.from("\r\n"),
    );
  }
  parts.push(Buffer.from(`0;chunk-signature=${sign(Buffer.alloc(0))}\r\n`));
  const { trailer } = opts;
  if (trailer) {
    const canonical = `${trailer.name}:${trailer.value}\n`;
    const sts = ["AWS4-HMAC-SHA256-TRAILER", s.amzDate, s.scope, previous, sha256Hex(canonical)].join("\n");
    const trailerSignature = signatureOf(s.key, sts);
    signatures.push(trailerSignature);
    parts.push(
      Buffer.from(`${trailer.name}:${trailer.value}\r\nx-amz-trailer-signature:${trailerSignature}\r\n`),
    );
  }
  parts.push(Buffer.from("\r\n"));
  return { body: Buffer.concat(parts), signatures };
}
