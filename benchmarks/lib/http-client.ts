import { Agent, type IncomingHttpHeaders, request } from "node:http";
import type { Readable } from "node:stream";
import { type Credentials, sha256Hex, sign, UNSIGNED_PAYLOAD } from "./sigv4.js";

export type Response = { status: number; headers: IncomingHttpHeaders; body: Buffer; bytes: number };

export type Call = {
  method: string;
  /** Encoded path. */
  path: string;
  query?: Array<[string, string]>;
  headers?: Record<string, string>;
  /** A buffer (hashed for the signature unless `unsigned`) or a stream (always unsigned). */
  body?: Buffer | Readable;
  unsigned?: boolean;
  /** Count the response bytes without keeping them (large GETs). */
  discard?: boolean;
};

/**
 * One endpoint as the load generators see it: a keep-alive agent with one socket per concurrent
 * client, and SigV4-signed requests (every target is signed alike, so the client costs the same).
 */
export class Endpoint {
  readonly agent: Agent;
  private readonly host: string;
  private readonly port: number;

  constructor(
    readonly name: string,
    readonly url: string,
    private readonly creds: Credentials,
    concurrency = 16,
  ) {
    const u = new URL(url);
    this.host = u.hostname;
    this.port = Number(u.port);
    this.agent = new Agent({ keepAlive: true, maxSockets: concurrency, maxFreeSockets: concurrency });
  }

  call(c: Call): Promise<Response> {
    const buffer = Buffer.isBuffer(c.body) ? c.body : undefined;
    const payloadHash = c.unsigned || (c.body && !buffer) ? UNSIGNED_PAYLOAD : sha256Hex(buffer ?? "");
    const headers: Record<string, string> = { ...c.headers };
    if (buffer) headers["content-length"] = String(buffer.length);
    const signed = sign(
      {
        method: c.method,
        host: `${this.host}:${this.port}`,
        path: c.path,
        query: c.query,
        headers,
        payloadHash,
      },
      this.creds,
    );
    return new Promise<Response>((resolve, reject) => {
      const req = request(
        {
          host: this.host,
          port: this.port,
          method: c.method,
          path: signed.target,
          headers: signed.headers,
          agent: this.agent,
        },
        (res) => {
          const chunks: Buffer[] = [];
          let bytes = 0;
          res.on("data", (chunk: Buffer) => {
            bytes += chunk.length;
            if (!c.discard) chunks.push(chunk);
          });
          res.on("error", reject);
          res.on("end", () =>
            resolve({
              status: res.statusCode ?? 0,
              headers: res.headers,
              body: Buffer.concat(chunks),
              bytes,
            }),
          );
        },
      );
      req.on("error", reject);
      if (buffer) req.end(buffer);
      else if (c.body) (c.body as Readable).pipe(req);
      else req.end();
    });
  }

  /** Like call, but fails unless the status is 2xx. */
  async ok(c: Call): Promise<Response> {
    const res = await this.call(c);
    if (res.status < 200 || res.status > 299) {
      throw new Error(
        `${this.name}: ${c.method} ${c.path} answered ${res.status} ${res.body.toString().slice(0, 300)}`,
      );
    }
    return res;
  }

  close(): void {
    this.agent.destroy();
  }
}

/** `/bucket/key` with each key segment encoded. */
export const objectPath = (bucket: string, key: string): string =>
  `/${bucket}/${key
    .split("/")
    .map((s) => encodeURIComponent(s))
    .join("/")}`;
