import { createHash, createHmac } from "node:crypto";

/**
 * A small SigV4 signer for the load generators (Authorization header, service s3). Written for
 * speed, not generality: the caller gives the path already encoded and the query as pairs. Every
 * target of a comparison gets requests signed the same way, so the client's cost is the same.
 */

export type Credentials = { accessKeyId: string; secretAccessKey: string };

export const UNSIGNED_PAYLOAD = "UNSIGNED-PAYLOAD";
export const EMPTY_SHA256 = createHash("sha256").update("").digest("hex");

const keys = new Map<string, Buffer>();

function signingKey(secret: string, date: string, region: string): Buffer {
  const id = `${secret}\n${date}\n${region}`;
  let key = keys.get(id);
  if (!key) {
    const kDate = createHmac("sha256", `AWS4${secret}`).update(date).digest();
    const kRegion = createHmac("sha256", kDate).update(region).digest();
    const kService = createHmac("sha256", kRegion).update("s3").digest();
    key = createHmac("sha256", kService).update("aws4_request").digest();
    keys.set(id, key);
  }
  return key;
}

/** RFC 3986 encoding as SigV4 wants it. */
export function awsEncode(s: string): string {
  return encodeURIComponent(s).replace(/[!'()*]/g, (c) => `%${c.charCodeAt(0).toString(16).toUpperCase()}`);
}

export type ToSign = {
  method: string;
  host: string;
  /** Encoded path, as sent. */
  path: string;
  query?: Array<[string, string]>;
  /** Extra headers to send and sign (lower-case names). */
  headers?: Record<string, string>;
  payloadHash: string;
};

/** The headers to send (signed) and the request target. */
export function sign(
  req: ToSign,
  creds: Credentials,
  region = "us-east-1",
): { target: string; headers: Record<string, string> } {
  const amzDate = new Date()
    .toISOString()
    .replace(/[-:]/g, "")
    .replace(/\.\d{3}/, "");
  const date = amzDate.slice(0, 8);
  const headers: Record<string, string> = {
    ...req.headers,
    host: req.host,
    "x-amz-content-sha256": req.payloadHash,
    "x-amz-date": amzDate,
  };
  const names = Object.keys(headers).sort();
  const canonicalHeaders = names.map((n) => `${n}:${headers[n]!.trim()}\n`).join("");
  const signedHeaders = names.join(";");
  const query = (req.query ?? [])
    .map(([k, v]) => [awsEncode(k), awsEncode(v)] as const)
    .sort((a, b) => (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : a[1] < b[1] ? -1 : 1))
    .map(([k, v]) => `${k}=${v}`)
    .join("&");
  const canonical = [req.method, req.path, query, canonicalHeaders, signedHeaders, req.payloadHash].join(
    "\n",
  );
  const scope = `${date}/${region}/s3/aws4_request`;
  const toSign = `AWS4-HMAC-SHA256\n${amzDate}\n${scope}\n${createHash("sha256").update(canonical).digest("hex")}`;
  const signature = createHmac("sha256", signingKey(creds.secretAccessKey, date, region))
    .update(toSign)
    .digest("hex");
  headers.authorization = `AWS4-HMAC-SHA256 Credential=${creds.accessKeyId}/${scope}, SignedHeaders=${signedHeaders}, Signature=${signature}`;
  return { target: query ? `${req.path}?${query}` : req.path, headers };
}

export const sha256Hex = (data: string | Buffer): string => createHash("sha256").update(data).digest("hex");
