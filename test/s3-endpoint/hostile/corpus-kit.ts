import { XMLParser } from "fast-xml-parser";
import { sendRaw } from "../../http/raw-socket.js";
import { sha256Hex } from "../../support/digest.js";
import { type Credentials, presign, rawRequest, signRequest } from "../../support/signed-http.js";

/** What the corpus needs to know about the gateway under attack. */
export type CorpusEnv = {
  url: string;
  host: string;
  bucket: string;
  /** A valid fencing token covering the whole bucket: refusals are never just "no token". */
  token: string;
  /** An open multipart upload of seed/upload, with part 1 uploaded. */
  uploadId: string;
  partEtag: string;
  presign(
    method: string,
    path: string,
    expiresIn: number,
    signingDate?: Date,
    query?: Record<string, string>,
  ): Promise<string>;
};

/** An answer as read off the wire. */
export type Answer = {
  method: string;
  status: number;
  headers: Record<string, string | string[] | undefined>;
  body: string;
};

export type Expectation =
  | { refused: true; code?: string; status?: number; message?: string }
  | { ok: number[] };

export type HostileCase = { name: string; send: () => Promise<Answer>; expect: Expectation };

export const refused = (code?: string, status?: number, message?: string): Expectation => ({
  refused: true,
  ...(code !== undefined ? { code } : {}),
  ...(status !== undefined ? { status } : {}),
  ...(message !== undefined ? { message } : {}),
});

export const CREDENTIALS_WRONG: Credentials = { accessKeyId: "fencegate", secretAccessKey: "not-the-secret" };

let endpoint = "";

/** The gateway every case of this process talks to. */
export function useEndpoint(url: string): void {
  endpoint = url;
}

/** A request that got no answer at all within this long is a hang. */
export const ANSWER_WITHIN_MS = 8_000;

function within<T>(p: Promise<T>, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(
      () => reject(new Error(`no answer within ${ANSWER_WITHIN_MS} ms: ${what}`)),
      ANSWER_WITHIN_MS,
    );
  });
  return Promise.race([p, timeout]).finally(() => clearTimeout(timer));
}

export type SignedSpec = {
  method: string;
  path: string;
  query?: Record<string, string>;
  /** The query exactly as sent (it may not decode); signed as far as it decodes. */
  rawQuery?: string;
  headers?: Record<string, string>;
  body?: string | Buffer;
  payloadHash?: string;
  credentials?: Credentials;
};

function decodeLoosely(s: string): string {
  try {
    return decodeURIComponent(s);
  } catch {
    return s;
  }
}

function queryObject(rawQuery: string): Record<string, string> {
  const out: Record<string, string> = {};
  for (const part of rawQuery.split("&")) {
    if (part === "") continue;
    const eq = part.indexOf("=");
    const [n, v] = eq < 0 ? [part, ""] : [part.slice(0, eq), part.slice(eq + 1)];
    out[decodeLoosely(n)] = decodeLoosely(v);
  }
  return out;
}

async function signSpec(spec: SignedSpec) {
  const query = spec.rawQuery !== undefined ? queryObject(spec.rawQuery) : spec.query;
  const req = await signRequest(endpoint, {
    method: spec.method,
    path: spec.path,
    ...(query ? { query } : {}),
    ...(spec.headers ? { headers: spec.headers } : {}),
    ...(spec.body !== undefined ? { body: spec.body } : {}),
    ...(spec.payloadHash ? { payloadHash: spec.payloadHash } : {}),
    ...(spec.credentials ? { credentials: spec.credentials } : {}),
  });
  if (spec.rawQuery !== undefined) req.path = `${spec.path}?${spec.rawQuery}`;
  return req;
}

/** A SigV4-signed request sent with node:http. */
export async function signed(spec: SignedSpec): Promise<Answer> {
  const req = await signSpec(spec);
  const res = await within(rawRequest(endpoint, req), `${spec.method} ${spec.path}`);
  return { method: spec.method, status: res.status, headers: res.headers, body: res.text };
}

/** An unsigned request (presigned URLs, anonymous ones) sent with node:http. */
export async function unsigned(spec: {
  method: string;
  path: string;
  body?: string;
  headers?: Record<string, string>;
}): Promise<Answer> {
  const res = await within(
    rawRequest(endpoint, {
      method: spec.method,
      path: spec.path,
      headers: {
        ...(spec.body !== undefined ? { "content-length": String(Buffer.byteLength(spec.body)) } : {}),
        ...spec.headers,
      },
      ...(spec.body !== undefined ? { body: spec.body } : {}),
    }),
    `${spec.method} ${spec.path}`,
  );
  return { method: spec.method, status: res.status, headers: res.headers, body: res.text };
}

/** Bytes written exactly as given on a fresh connection. */
export async function raw(bytes: string | Buffer): Promise<Answer> {
  const method = /^([A-Za-z]+) /.exec(bytes.toString("latin1").slice(0, 16))?.[1] ?? "?";
  const a = await sendRaw(endpoint, bytes, { waitMs: ANSWER_WITHIN_MS });
  if (a.silent) throw new Error("no answer: the connection was closed or left silent");
  return { method, status: a.status, headers: a.headers, body: a.body };
}

/**
 * A request signed like `signed`, then written byte for byte: with `body(seed)` computed from the
 * request's signature (aws-chunked framing, which must keep its length), and with `extra` header
 * values repeated as separate lines after signing.
 */
export async function signedThenRaw(
  spec: SignedSpec,
  body?: (seedSignature: string) => string,
  extra?: Record<string, string | string[]>,
): Promise<Answer> {
  const placeholder = body?.("0".repeat(64));
  const req = await signSpec({
    ...spec,
    ...(placeholder !== undefined ? { body: placeholder } : {}),
    ...(placeholder !== undefined && spec.payloadHash === undefined
      ? { payloadHash: sha256Hex(placeholder) }
      : {}),
  });
  const headers = req.headers as Record<string, string>;
  const seed =
    /Signature=([0-9a-f]{64})/.exec(headers.authorization ?? headers.Authorization ?? "")?.[1] ?? "";
  const payload = body ? body(seed) : (req.body ?? "");
  const lines = [`${spec.method} ${req.path} HTTP/1.1`];
  for (const [name, value] of Object.entries(headers)) lines.push(`${name}: ${value}`);
  for (const [name, values] of Object.entries(extra ?? {})) {
    if (Array.isArray(values)) for (const v of values.slice(1)) lines.push(`${name}: ${v}`);
  }
  const head = `${lines.join("\r\n")}\r\n\r\n`;
  return raw(Buffer.concat([Buffer.from(head, "latin1"), Buffer.from(payload)]));
}

const xml = new XMLParser({ parseTagValue: false });

/** Why an answer breaks its case's expectation; null when it keeps it. */
export function violation(c: HostileCase, a: Answer): string | null {
  const requestId = a.headers["x-amz-request-id"];
  if (typeof requestId !== "string" || !/^[0-9A-F]{16}$/.test(requestId))
    return `no x-amz-request-id (status ${a.status})`;
  if ("ok" in c.expect) {
    return c.expect.ok.includes(a.status)
      ? null
      : `status ${a.status}, expected one of ${c.expect.ok}: ${a.body.slice(0, 200)}`;
  }
  const want = c.expect;
  if (a.status >= 500) return `5xx: ${a.status} ${a.body.slice(0, 200)}`;
  if (a.status < 400 || (want.status !== undefined && a.status !== want.status)) {
    return `status ${a.status}, expected ${want.status ?? "4xx"}: ${a.body.slice(0, 200)}`;
  }
  if (a.method === "HEAD") return null;
  if (!/xml/.test(String(a.headers["content-type"])))
    return `not XML: ${a.headers["content-type"]} ${a.body.slice(0, 100)}`;
  let doc: { Error?: Record<string, unknown> };
  try {
    doc = xml.parse(a.body) as typeof doc;
  } catch (e) {
    return `unparseable XML: ${(e as Error).message}`;
  }
  const err = doc.Error;
  if (!err || typeof err.Code !== "string" || typeof err.Message !== "string")
    return `not an S3 error: ${a.body.slice(0, 200)}`;
  if (err.RequestId !== requestId)
    return `RequestId ${String(err.RequestId)} is not the header's ${requestId}`;
  if (want.code !== undefined && err.Code !== want.code)
    return `code ${err.Code}, expected ${want.code}: ${err.Message}`;
  if (want.message !== undefined && err.Message !== want.message)
    return `message "${err.Message}", expected "${want.message}"`;
  return null;
}

/** Runs cases `parallel` at a time; returns the failures as readable lines. */
export async function runCases(cases: readonly HostileCase[], parallel = 12): Promise<string[]> {
  const failures: string[] = [];
  let next = 0;
  const worker = async () => {
    while (next < cases.length) {
      const c = cases[next++]!;
      try {
        const why = violation(c, await c.send());
        if (why) failures.push(`${c.name}: ${why}`);
      } catch (e) {
        failures.push(`${c.name}: ${(e as Error).message}`);
      }
    }
  };
  await Promise.all(Array.from({ length: parallel }, worker));
  return failures;
}

export { presign };
