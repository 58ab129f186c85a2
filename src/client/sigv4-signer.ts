import { createHash, createHmac } from "node:crypto";

/**
 * A small AWS Signature Version 4 signer on node:crypto, for the lease API's requests (service
 * s3, header authorization, a signed payload hash). The SDK's FenceClient and the command line
 * both sign with it; it loads nothing beyond node:crypto, so a client command starts fast.
 */
export type SigV4Credentials = {
  accessKeyId: string;
  secretAccessKey: string;
  sessionToken?: string;
};

export type SigV4Request = {
  method: string;
  /** The host header's value (hostname[:port]). */
  host: string;
  /** The path as sent: already URI-encoded once (it is signed as it is, not encoded again). */
  path: string;
  /** The query's parameters, unencoded (signed and sent in RFC 3986 encoding, sorted). */
  query: Record<string, string>;
  /** Extra headers to sign and send (lower-case names). */
  headers: Record<string, string>;
  body?: string;
};

export type SignedRequest = {
  /** Every header to send: the given ones, host, x-amz-date, x-amz-content-sha256, authorization. */
  headers: Record<string, string>;
  /** The encoded query string, without "?" (empty when there is none). */
  search: string;
};

/** RFC 3986 encoding, as SigV4 wants it (encodeURIComponent leaves !'()* alone). */
export function awsEncode(s: string): string {
  return encodeURIComponent(s).replace(/[!'()*]/g, (c) => `%${c.charCodeAt(0).toString(16).toUpperCase()}`);
}

const sha256Hex = (data: string) => createHash("sha256").update(data, "utf8").digest("hex");
const hmac = (key: Buffer | string, data: string) => createHmac("sha256", key).update(data, "utf8").digest();

export class SigV4Signer {
  private readonly keys = new Map<string, Buffer>();
  constructor(
    private readonly credentials: SigV4Credentials,
    private readonly region: string,
    private readonly service = "s3",
  ) {}

  sign(req: SigV4Request, now: Date = new Date()): SignedRequest {
    const amzDate = now
      .toISOString()
      .replace(/[-:]/g, "")
      .replace(/\.\d{3}/, "");
    const day = amzDate.slice(0, 8);
    const payloadHash = sha256Hex(req.body ?? "");
    const headers: Record<string, string> = {};
    for (const [k, v] of Object.entries(req.headers)) headers[k.toLowerCase()] = v;
    headers.host = req.host;
    headers["x-amz-date"] = amzDate;
    headers["x-amz-content-sha256"] = payloadHash;
    if (this.credentials.sessionToken) headers["x-amz-security-token"] = this.credentials.sessionToken;

    const names = Object.keys(headers).sort();
    const canonicalHeaders = names.map((n) => `${n}:${headers[n]!.trim().replace(/\s+/g, " ")}\n`).join("");
    const signedHeaders = names.join(";");
    const search = Object.entries(req.query)
      .map(([k, v]) => [awsEncode(k), awsEncode(v)] as const)
      .sort(([a, av], [b, bv]) => (a < b ? -1 : a > b ? 1 : av < bv ? -1 : av > bv ? 1 : 0))
      .map(([k, v]) => `${k}=${v}`)
      .join("&");
    const canonicalRequest = [
      req.method.toUpperCase(),
      req.path || "/",
      search,
      canonicalHeaders,
      signedHeaders,
      payloadHash,
    ].join("\n");
    const scope = `${day}/${this.region}/${this.service}/aws4_request`;
    const stringToSign = ["AWS4-HMAC-SHA256", amzDate, scope, sha256Hex(canonicalRequest)].join("\n");
    const signature = createHmac("sha256", this.signingKey(day)).update(stringToSign, "utf8").digest("hex");
    headers.authorization =
      `AWS4-HMAC-SHA256 Credential=${this.credentials.accessKeyId}/${scope}, ` +
      `SignedHeaders=${signedHeaders}, Signature=${signature}`;
    return { headers, search };
  }

  /** The day's signing key (kept per day: a long-lived client crosses midnight). */
  private signingKey(day: string): Buffer {
    let key = this.keys.get(day);
    if (!key) {
      const kDate = hmac(`AWS4${this.credentials.secretAccessKey}`, day);
      key = hmac(hmac(hmac(kDate, this.region), this.service), "aws4_request");
      this.keys.clear();
      this.keys.set(day, key);
    }
    return key;
  }
}
