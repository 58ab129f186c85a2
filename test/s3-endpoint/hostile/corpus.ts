import { crc32 } from "node:zlib";
import { sha256Hex } from "../../support/digest.js";
import {
  type CorpusEnv,
  CREDENTIALS_WRONG,
  type HostileCase,
  raw,
  refused,
  signed,
  signedThenRaw,
  unsigned,
} from "./corpus-kit.js";

/**
 * The hostile-input corpus: hundreds of requests, generated per category from lists of bad
 * pieces. Every case names what it expects: a refusal (a 4xx S3 XML error with a request id,
 * optionally a given code) or a defined success. None of them may leave anything in storage.
 */

/** Path segments of object keys that must never be accepted as a key. */
const BAD_KEY_SEGMENTS: readonly string[] = [
  // malformed percent-escapes
  "%zz",
  "%",
  "a%",
  "%4",
  "%G0",
  "a%2",
  "%%41",
  // percent-escapes of bytes that are not UTF-8
  "%FF",
  "%C3",
  "%C3%28",
  "%E0%A4%A",
  "%ED%A0%80",
  "%F8%88%80%80%80",
  "%C0%AF",
  "%80",
  "%FE%FF",
  "a%F0%9F%98",
  // control bytes no key may hold (tab, LF and CR are allowed in S3 keys)
  ...Array.from({ length: 32 }, (_, i) => i)
    .filter((i) => i !== 9 && i !== 10 && i !== 13)
    .map((i) => `a%${i.toString(16).toUpperCase().padStart(2, "0")}b`),
  // keys that would leave a filesystem root, or are too long
  "..",
  ".",
  "a/../b",
  "a/./b",
  "%2E%2E",
  "a/%2e%2e/b",
  "%2e%2e%2f%2e%2e%2fetc",
  "%5C",
  "a%5C..%5Cb",
  "/leading",
  "k".repeat(1025),
  "%C3%A9".repeat(513),
];

export function keyCases(env: CorpusEnv): HostileCase[] {
  const cases: HostileCase[] = [];
  for (const seg of BAD_KEY_SEGMENTS) {
    const path = `/${env.bucket}/${seg}`;
    const label = seg.length > 24 ? `${seg.slice(0, 12)}…(${seg.length})` : seg;
    const token = { "x-fence-token": env.token };
    cases.push(
      {
        name: `key ${label}: PUT`,
        send: () => signed({ method: "PUT", path, body: "evil", headers: token }),
        expect: refused(),
      },
      { name: `key ${label}: GET`, send: () => signed({ method: "GET", path }), expect: refused() },
      { name: `key ${label}: HEAD`, send: () => signed({ method: "HEAD", path }), expect: refused() },
      {
        name: `key ${label}: DELETE`,
        send: () => signed({ method: "DELETE", path, headers: token }),
        expect: refused(),
      },
      {
        name: `key ${label}: CreateMultipartUpload`,
        send: () => signed({ method: "POST", path, query: { uploads: "" }, headers: token }),
        expect: refused(),
      },
      {
        name: `key ${label}: CopyObject source`,
        send: () =>
          signed({
            method: "PUT",
            path: `/${env.bucket}/copy-target`,
            headers: { ...token, "x-amz-copy-source": `/${env.bucket}/${seg}` },
          }),
        expect: refused(),
      },
    );
  }
  return cases;
}

/** Query values that are not percent-encoded UTF-8, or carry control bytes. */
const BAD_QUERY_VALUES = ["%zz", "%FF", "%C3%28", "a%", "%00", "%01", "%1F"];

const QUERY_TARGETS: ReadonlyArray<{
  name: string;
  base: (env: CorpusEnv) => { path: string; query: string };
}> = [
  { name: "prefix", base: (e) => ({ path: `/${e.bucket}`, query: "list-type=2&prefix=" }) },
  { name: "delimiter", base: (e) => ({ path: `/${e.bucket}`, query: "list-type=2&delimiter=" }) },
  { name: "start-after", base: (e) => ({ path: `/${e.bucket}`, query: "list-type=2&start-after=" }) },
  {
    name: "continuation-token",
    base: (e) => ({ path: `/${e.bucket}`, query: "list-type=2&continuation-token=" }),
  },
  { name: "marker", base: (e) => ({ path: `/${e.bucket}`, query: "marker=" }) },
  { name: "max-keys", base: (e) => ({ path: `/${e.bucket}`, query: "max-keys=" }) },
  { name: "encoding-type", base: (e) => ({ path: `/${e.bucket}`, query: "encoding-type=" }) },
  { name: "key-marker", base: (e) => ({ path: `/${e.bucket}`, query: "versions&key-marker=" }) },
  { name: "upload key-marker", base: (e) => ({ path: `/${e.bucket}`, query: "uploads&key-marker=" }) },
  { name: "partNumber", base: (e) => ({ path: `/${e.bucket}/seed/object`, query: "partNumber=" }) },
  { name: "versionId", base: (e) => ({ path: `/${e.bucket}/seed/object`, query: "versionId=" }) },
  { name: "uploadId", base: (e) => ({ path: `/${e.bucket}/seed/object`, query: "uploadId=" }) },
  {
    name: "response-content-type",
    base: (e) => ({ path: `/${e.bucket}/seed/object`, query: "response-content-type=" }),
  },
  { name: "query name", base: (e) => ({ path: `/${e.bucket}`, query: "list-type=2&x" }) },
];

export function queryCases(env: CorpusEnv): HostileCase[] {
  const cases: HostileCase[] = [];
  for (const target of QUERY_TARGETS) {
    for (const value of BAD_QUERY_VALUES) {
      const { path, query } = target.base(env);
      const q = target.name === "query name" ? `${query}${value}=1` : `${query}${value}`;
      cases.push({
        name: `query ${target.name}=${value}`,
        send: () => signed({ method: "GET", path, rawQuery: q }),
        expect: refused(),
      });
    }
  }
  // A write's token in the query, broken the same ways.
  for (const value of BAD_QUERY_VALUES) {
    cases.push({
      name: `query x-fence-token=${value} on PUT`,
      send: () =>
        signed({
          method: "PUT",
          path: `/${env.bucket}/q-token`,
          rawQuery: `x-fence-token=${value}`,
          body: "x",
        }),
      expect: refused(),
    });
  }
  return cases;
}

const BILLION_LAUGHS = `<?xml version="1.0"?><!DOCTYPE lolz [<!ENTITY lol "lol">${Array.from(
  { length: 9 },
  (_, i) => `<!ENTITY lol${i + 1} "${`&lol${i === 0 ? "" : i};`.repeat(10)}">`,
).join("")}]>`;

/** XML bodies that must never be parsed into anything. */
function hostileXmlBodies(root: string, inner: string): Array<[string, Buffer | string]> {
  return [
    [
      "XXE file",
      `<?xml version="1.0"?><!DOCTYPE r [<!ENTITY x SYSTEM "file:///etc/passwd">]><${root}>${inner.replace("KEY", "&x;")}</${root}>`,
    ],
    ["XXE http", `<!DOCTYPE r [<!ENTITY x SYSTEM "http://127.0.0.1:1/">]><${root}>&x;</${root}>`],
    ["XXE parameter entity", `<!DOCTYPE r [<!ENTITY % p SYSTEM "file:///etc/passwd"> %p;]><${root}/>`],
    ["billion laughs", `${BILLION_LAUGHS}<${root}>${inner.replace("KEY", "&lol9;")}</${root}>`],
    [
      "quadratic blowup",
      `<!DOCTYPE r [<!ENTITY a "${"a".repeat(50_000)}">]><${root}>${"&a;".repeat(5_000)}</${root}>`,
    ],
    ["deep nesting 10k", `<${root}>${"<a>".repeat(10_000)}${"</a>".repeat(10_000)}</${root}>`],
    ["deep nesting 150k", `<${root}>${"<a>".repeat(150_000)}`],
    ["oversized 3 MiB", `<${root}>${"<x>y</x>".repeat(400_000)}</${root}>`],
    ["wrong root", `<NotTheRoot>${inner}</NotTheRoot>`],
    ["two roots", `<${root}>${inner}</${root}><${root}>${inner}</${root}>`],
    ["not XML", "this is not xml at all"],
    ["unclosed", `<${root}>${inner}`],
    [
      "invalid UTF-8 bytes",
      Buffer.concat([Buffer.from(`<${root}>`), Buffer.from([0xff, 0xfe, 0xc3]), Buffer.from(`</${root}>`)]),
    ],
    [
      "UTF-16 with BOM",
      Buffer.concat([Buffer.from([0xff, 0xfe]), Buffer.from(`<${root}>${inner}</${root}>`, "utf16le")]),
    ],
    ["processing instruction and comment only", "<?xml version='1.0'?><!-- nothing -->"],
    ["bad character reference", `<${root}>${inner.replace("KEY", "&#0;&#xD800;")}</${root}>`],
    ["unknown entity", `<${root}>${inner.replace("KEY", "&nbsp;")}</${root}>`],
  ];
}

export function xmlCases(env: CorpusEnv): HostileCase[] {
  const cases: HostileCase[] = [];
  const ops: Array<{
    op: string;
    root: string;
    inner: string;
    request: (body: Buffer | string) => ReturnType<typeof signed>;
  }> = [
    {
      op: "DeleteObjects",
      root: "Delete",
      inner: "<Object><Key>seed/KEY</Key></Object>",
      request: (body) =>
        signed({
          method: "POST",
          path: `/${env.bucket}`,
          query: { delete: "" },
          body,
          headers: { "x-fence-token": env.token },
        }),
    },
    {
      op: "CompleteMultipartUpload",
      root: "CompleteMultipartUpload",
      inner: `<Part><PartNumber>1</PartNumber><ETag>${env.partEtag}KEY</ETag></Part>`,
      request: (body) =>
        signed({
          method: "POST",
          path: `/${env.bucket}/seed/upload`,
          query: { uploadId: env.uploadId },
          body,
          headers: { "x-fence-token": env.token },
        }),
    },
    {
      op: "CreateBucket",
      root: "CreateBucketConfiguration",
      inner: "<LocationConstraint>KEY</LocationConstraint>",
      request: (body) => signed({ method: "PUT", path: "/hostile-new-bucket", body }),
    },
    {
      op: "PutBucketAcl",
      root: "AccessControlPolicy",
      inner:
        "<AccessControlList><Grant><Grantee><ID>KEY</ID></Grantee><Permission>FULL_CONTROL</Permission></Grant></AccessControlList>",
      request: (body) => signed({ method: "PUT", path: `/${env.bucket}`, query: { acl: "" }, body }),
    },
  ];
  for (const { op, root, inner, request } of ops) {
    for (const [label, body] of hostileXmlBodies(root, inner)) {
      cases.push({ name: `xml ${op}: ${label}`, send: () => request(body), expect: refused() });
    }
  }
  cases.push({
    name: "xml DeleteObjects: 1001 keys",
    send: () =>
      signed({
        method: "POST",
        path: `/${env.bucket}`,
        query: { delete: "" },
        body: `<Delete>${"<Object><Key>seed/object</Key></Object>".repeat(1001)}</Delete>`,
        headers: { "x-fence-token": env.token },
      }),
    expect: refused("MalformedXML"),
  });
  return cases;
}

const TRAILER_HEADERS = {
  "content-encoding": "aws-chunked",
  "x-amz-trailer": "x-amz-checksum-crc32",
  "x-amz-decoded-content-length": "5",
};

const crc32Base64 = (s: string) => {
  const b = Buffer.alloc(4);
  b.writeUInt32BE(crc32(Buffer.from(s)) >>> 0);
  return b.toString("base64");
};

/** aws-chunked bodies with bad sizes, framing, trailers and signatures. */
export function chunkedCases(env: CorpusEnv): HostileCase[] {
  const path = `/${env.bucket}/chunked`;
  const good = `x-amz-checksum-crc32:${crc32Base64("hello")}`;
  const unsignedBodies: Array<[string, string, Record<string, string>?]> = [
    ["non-hex size", `zz\r\nhello\r\n0\r\n${good}\r\n\r\n`],
    ["negative size", `-5\r\nhello\r\n0\r\n${good}\r\n\r\n`],
    ["huge size", `fffffffffffff\r\nhello\r\n0\r\n${good}\r\n\r\n`],
    ["size too long", `${"0".repeat(40)}5\r\nhello\r\n0\r\n${good}\r\n\r\n`],
    ["size larger than data", `9\r\nhello\r\n0\r\n${good}\r\n\r\n`],
    ["size smaller than data", `3\r\nhello\r\n0\r\n${good}\r\n\r\n`],
    ["no CRLF after data", `5\r\nhelloXX0\r\n${good}\r\n\r\n`],
    ["no final chunk", "5\r\nhello\r\n"],
    ["data after the end", `5\r\nhello\r\n0\r\n${good}\r\n\r\ngarbage`],
    ["header line of 5000 bytes", `5;${"x".repeat(5000)}\r\nhello\r\n0\r\n${good}\r\n\r\n`],
    ["trailer without colon", "5\r\nhello\r\n0\r\nx-amz-checksum-crc32\r\n\r\n"],
    ["wrong CRC32 trailer", "5\r\nhello\r\n0\r\nx-amz-checksum-crc32:AAAAAA==\r\n\r\n"],
    ["malformed CRC32 trailer", "5\r\nhello\r\n0\r\nx-amz-checksum-crc32:!!!!\r\n\r\n"],
    ["undeclared trailer", `5\r\nhello\r\n0\r\nx-amz-checksum-sha1:AAAA\r\n${good}\r\n\r\n`],
    ["missing trailer", "5\r\nhello\r\n0\r\n\r\n"],
    ["repeated trailer", `5\r\nhello\r\n0\r\n${good}\r\n${good}\r\n\r\n`],
    [
      "twenty trailers",
      `5\r\nhello\r\n0\r\n${Array.from({ length: 20 }, (_, i) => `x-t${i}:v`).join("\r\n")}\r\n\r\n`,
    ],
    [
      "trailer signature on unsigned",
      `5\r\nhello\r\n0\r\n${good}\r\nx-amz-trailer-signature:${"0".repeat(64)}\r\n\r\n`,
    ],
    [
      "decoded length too small",
      `5\r\nhello\r\n0\r\n${good}\r\n\r\n`,
      { "x-amz-decoded-content-length": "3" },
    ],
    [
      "decoded length too large",
      `5\r\nhello\r\n0\r\n${good}\r\n\r\n`,
      { "x-amz-decoded-content-length": "50" },
    ],
    [
      "decoded length negative",
      `5\r\nhello\r\n0\r\n${good}\r\n\r\n`,
      { "x-amz-decoded-content-length": "-5" },
    ],
    [
      "decoded length not a number",
      `5\r\nhello\r\n0\r\n${good}\r\n\r\n`,
      { "x-amz-decoded-content-length": "five" },
    ],
    [
      "two trailer names",
      `5\r\nhello\r\n0\r\n${good}\r\n\r\n`,
      { "x-amz-trailer": "x-amz-checksum-crc32,x-amz-checksum-sha1" },
    ],
    ["unknown trailer name", `5\r\nhello\r\n0\r\n${good}\r\n\r\n`, { "x-amz-trailer": "x-amz-meta-evil" }],
  ];
  const cases: HostileCase[] = unsignedBodies.map(([label, body, extra]) => ({
    name: `aws-chunked unsigned: ${label}`,
    send: () =>
      signed({
        method: "PUT",
        path,
        body,
        payloadHash: "STREAMING-UNSIGNED-PAYLOAD-TRAILER",
        headers: { ...TRAILER_HEADERS, "x-fence-token": env.token, ...extra },
      }),
    expect: refused(),
  }));
  cases.push({
    name: "aws-chunked unsigned trailer on a request whose signature is wrong",
    send: () =>
      signed({
        method: "PUT",
        path,
        body: `5\r\nhello\r\n0\r\n${good}\r\n\r\n`,
        payloadHash: "STREAMING-UNSIGNED-PAYLOAD-TRAILER",
        headers: { ...TRAILER_HEADERS, "x-fence-token": env.token },
        credentials: CREDENTIALS_WRONG,
      }),
    expect: refused("SignatureDoesNotMatch"),
  });
  const signedBodies: Array<[string, (sig: string) => string]> = [
    ["missing chunk signature", () => "5\r\nhello\r\n0\r\n\r\n"],
    [
      "wrong chunk signature",
      () => `5;chunk-signature=${"0".repeat(64)}\r\nhello\r\n0;chunk-signature=${"1".repeat(64)}\r\n\r\n`,
    ],
    ["truncated chunk signature", () => "5;chunk-signature=abc\r\nhello\r\n0;chunk-signature=abc\r\n\r\n"],
    [
      "non-hex chunk signature",
      () => `5;chunk-signature=${"z".repeat(64)}\r\nhello\r\n0;chunk-signature=${"z".repeat(64)}\r\n\r\n`,
    ],
    [
      "seed signature reused for chunks",
      (seed) => `5;chunk-signature=${seed}\r\nhello\r\n0;chunk-signature=${seed}\r\n\r\n`,
    ],
    [
      "trailer on a signed payload without trailers",
      () =>
        `5;chunk-signature=${"0".repeat(64)}\r\nhello\r\n0;chunk-signature=${"0".repeat(64)}\r\n${good}\r\n\r\n`,
    ],
  ];
  for (const [label, body] of signedBodies) {
    cases.push({
      name: `aws-chunked signed: ${label}`,
      send: () =>
        signedThenRaw(
          {
            method: "PUT",
            path,
            payloadHash: "STREAMING-AWS4-HMAC-SHA256-PAYLOAD",
            headers: { "x-amz-decoded-content-length": "5", "x-fence-token": env.token },
          },
          (seed) => body(seed),
        ),
      expect: refused(),
    });
  }
  cases.push({
    name: "aws-chunked signed trailer with a wrong trailer signature",
    send: () =>
      signedThenRaw(
        {
          method: "PUT",
          path,
          payloadHash: "STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER",
          headers: {
            "x-amz-decoded-content-length": "0",
            "x-amz-trailer": "x-amz-checksum-crc32",
            "x-fence-token": env.token,
          },
        },
        () =>
          `0;chunk-signature=${"0".repeat(64)}\r\n${good}\r\nx-amz-trailer-signature:${"0".repeat(64)}\r\n\r\n`,
      ),
    expect: refused(),
  });
  return cases;
}

/** Presigned URLs whose query parameters are missing, malformed or out of range. */
export function presignedCases(env: CorpusEnv): HostileCase[] {
  const edits: Array<[string, (q: string) => string, string?]> = [
    ["expiry missing", (q) => q.replace(/&?X-Amz-Expires=[^&]*/, "")],
    ["expiry negative", (q) => q.replace(/X-Amz-Expires=\d+/, "X-Amz-Expires=-1")],
    ["expiry zero", (q) => q.replace(/X-Amz-Expires=\d+/, "X-Amz-Expires=0")],
    ["expiry not a number", (q) => q.replace(/X-Amz-Expires=\d+/, "X-Amz-Expires=abc")],
    ["expiry fractional", (q) => q.replace(/X-Amz-Expires=\d+/, "X-Amz-Expires=1.5")],
    ["expiry empty", (q) => q.replace(/X-Amz-Expires=\d+/, "X-Amz-Expires=")],
    ["expiry over seven days", (q) => q.replace(/X-Amz-Expires=\d+/, "X-Amz-Expires=604801")],
    ["expiry enormous", (q) => q.replace(/X-Amz-Expires=\d+/, "X-Amz-Expires=99999999999999999999999")],
    ["expiry with spaces", (q) => q.replace(/X-Amz-Expires=\d+/, "X-Amz-Expires=%2060")],
    ["expiry repeated", (q) => `${q}&X-Amz-Expires=60`],
    ["date malformed", (q) => q.replace(/X-Amz-Date=[^&]*/, "X-Amz-Date=20261313T250000Z")],
    ["date missing", (q) => q.replace(/&?X-Amz-Date=[^&]*/, "")],
    ["date far future", (q) => q.replace(/X-Amz-Date=\d{8}/, "X-Amz-Date=20990101")],
    ["algorithm wrong", (q) => q.replace("AWS4-HMAC-SHA256", "AWS4-HMAC-SHA1")],
    ["credential short", (q) => q.replace(/X-Amz-Credential=[^&]*/, "X-Amz-Credential=fencegate")],
    ["credential bad escape", (q) => q.replace(/X-Amz-Credential=[^&]*/, "X-Amz-Credential=%zz")],
    ["signature missing", (q) => q.replace(/&?X-Amz-Signature=[^&]*/, "")],
    ["signature garbage", (q) => q.replace(/X-Amz-Signature=[^&]*/, "X-Amz-Signature=nothex")],
    ["signed headers empty", (q) => q.replace(/X-Amz-SignedHeaders=[^&]*/, "X-Amz-SignedHeaders=")],
    ["with an Authorization header too", (q) => q, "authorization"],
  ];
  const cases: HostileCase[] = [];
  for (const method of ["GET", "PUT"] as const) {
    for (const [label, edit, extra] of edits) {
      cases.push({
        name: `presigned ${method}: ${label}`,
        send: async () => {
          const url = await env.presign(method, `/${env.bucket}/seed/object`, 300);
          const [p, q = ""] = url.split("?");
          return unsigned({
            method,
            path: `${p}?${edit(q)}`,
            body: method === "PUT" ? "x" : undefined,
            headers: extra === "authorization" ? { authorization: "AWS4-HMAC-SHA256 Credential=x" } : {},
          });
        },
        expect: refused(),
      });
    }
    cases.push({
      name: `presigned ${method}: past its expiry`,
      send: async () => {
        const url = await env.presign(
          method,
          `/${env.bucket}/seed/object`,
          60,
          new Date(Date.now() - 3_600_000),
        );
        return unsigned({ method, path: url, body: method === "PUT" ? "x" : undefined });
      },
      expect: refused("AccessDenied", 403, "Request has expired"),
    });
  }
  // User metadata that a presigned URL carries in its query (signed): control bytes are refused.
  for (const [label, value] of [
    ["NUL", "a\u0000b"],
    ["unit separator", "a\u001fb"],
    ["escape", "\u001b[31m"],
  ]) {
    cases.push({
      name: `presigned PUT: metadata with ${label}`,
      send: async () => {
        const url = await env.presign("PUT", `/${env.bucket}/presigned-meta`, 300, undefined, {
          "x-amz-meta-m": value!,
        });
        return unsigned({ method: "PUT", path: url, body: "x", headers: { "x-fence-token": env.token } });
      },
      expect: refused("InvalidArgument", 400),
    });
  }
  return cases;
}

/** Broken HTTP: framing, header sections, request lines, sent byte for byte. */
export function httpCases(env: CorpusEnv): HostileCase[] {
  const h = env.host;
  const lines: Array<[string, string | Buffer]> = [
    [
      "Content-Length with Transfer-Encoding",
      `PUT /${env.bucket}/x HTTP/1.1\r\nHost: ${h}\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n`,
    ],
    [
      "Transfer-Encoding then Content-Length",
      `PUT /${env.bucket}/x HTTP/1.1\r\nHost: ${h}\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n0\r\n\r\n`,
    ],
    [
      "two different Content-Length",
      `PUT /${env.bucket}/x HTTP/1.1\r\nHost: ${h}\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello!`,
    ],
    ["negative Content-Length", `PUT /${env.bucket}/x HTTP/1.1\r\nHost: ${h}\r\nContent-Length: -1\r\n\r\n`],
    [
      "Content-Length not a number",
      `PUT /${env.bucket}/x HTTP/1.1\r\nHost: ${h}\r\nContent-Length: abc\r\n\r\n`,
    ],
    [
      "Transfer-Encoding gzip",
      `PUT /${env.bucket}/x HTTP/1.1\r\nHost: ${h}\r\nTransfer-Encoding: gzip\r\n\r\nxx`,
    ],
    [
      "Transfer-Encoding chunked twice",
      `PUT /${env.bucket}/x HTTP/1.1\r\nHost: ${h}\r\nTransfer-Encoding: chunked, chunked\r\n\r\n0\r\n\r\n`,
    ],
    [
      "bad chunk framing",
      `PUT /${env.bucket}/x HTTP/1.1\r\nHost: ${h}\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nhello\r\n0\r\n\r\n`,
    ],
    ["obsolete line folding", `GET /${env.bucket} HTTP/1.1\r\nHost: ${h}\r\nX-Folded: a\r\n b\r\n\r\n`],
    ["space before colon", `GET /${env.bucket} HTTP/1.1\r\nHost: ${h}\r\nX-Bad : a\r\n\r\n`],
    ["NUL in a header value", `GET /${env.bucket} HTTP/1.1\r\nHost: ${h}\r\nX-Nul: a\u0000b\r\n\r\n`],
    [
      "control byte in metadata",
      `PUT /${env.bucket}/x HTTP/1.1\r\nHost: ${h}\r\nx-amz-meta-a: a\u0001b\r\nContent-Length: 0\r\n\r\n`,
    ],
    ["bare LF line ends", `GET /${env.bucket} HTTP/1.1\nHost: ${h}\n\n`],
    ["no Host on HTTP/1.1", `GET /${env.bucket} HTTP/1.1\r\n\r\n`],
    ["two Host headers", `GET /${env.bucket} HTTP/1.1\r\nHost: ${h}\r\nHost: other.test\r\n\r\n`],
    [
      "two Authorization headers",
      `GET /${env.bucket} HTTP/1.1\r\nHost: ${h}\r\nAuthorization: a\r\nAuthorization: b\r\n\r\n`,
    ],
    ["HTTP/2.0 in the request line", `GET /${env.bucket} HTTP/2.0\r\nHost: ${h}\r\n\r\n`],
    ["HTTP/0.9 request line", `GET /${env.bucket}\r\n\r\n`],
    ["lower-case method", `get /${env.bucket} HTTP/1.1\r\nHost: ${h}\r\n\r\n`],
    ["unknown method", `FROB /${env.bucket} HTTP/1.1\r\nHost: ${h}\r\n\r\n`],
    ["CONNECT", `CONNECT ${h} HTTP/1.1\r\nHost: ${h}\r\n\r\n`],
    ["TRACE", `TRACE /${env.bucket} HTTP/1.1\r\nHost: ${h}\r\n\r\n`],
    ["request line of 20 KiB", `GET /${env.bucket}/${"a".repeat(20_000)} HTTP/1.1\r\nHost: ${h}\r\n\r\n`],
    ["header of 40 KiB", `GET /${env.bucket} HTTP/1.1\r\nHost: ${h}\r\nX-Big: ${"b".repeat(40_000)}\r\n\r\n`],
    ["3000 header lines", `GET /${env.bucket} HTTP/1.1\r\nHost: ${h}\r\n${"a:\r\n".repeat(3000)}\r\n`],
    [
      "3000 metadata headers",
      `PUT /${env.bucket}/x HTTP/1.1\r\nHost: ${h}\r\nContent-Length: 0\r\n${Array.from({ length: 3000 }, (_, i) => `x-amz-meta-${i}:\r\n`).join("")}\r\n`,
    ],
    ["backslash in the path", `GET /${env.bucket}/a\\b HTTP/1.1\r\nHost: ${h}\r\n\r\n`],
    ["invalid Host", `GET /${env.bucket} HTTP/1.1\r\nHost: bad host\r\n\r\n`],
    ["absolute-form target", `GET http://[::1/${env.bucket} HTTP/1.1\r\nHost: ${h}\r\n\r\n`],
    ["asterisk target", `GET * HTTP/1.1\r\nHost: ${h}\r\n\r\n`],
    [
      "raw non-ASCII path bytes",
      Buffer.concat([
        Buffer.from(`GET /${env.bucket}/`),
        Buffer.from([0xff, 0xfe]),
        Buffer.from(` HTTP/1.1\r\nHost: ${h}\r\n\r\n`),
      ]),
    ],
    [
      "unknown Expect on an unsigned PUT",
      `PUT /${env.bucket}/x HTTP/1.1\r\nHost: ${h}\r\nExpect: 200-ok\r\nContent-Length: 1\r\n\r\nx`,
    ],
  ];
  return lines.map(([label, bytes]) => ({
    name: `http ${label}`,
    send: () => raw(bytes),
    expect: refused(),
  }));
}

/** Signed requests with duplicated, oversized or contradictory headers. */
export function headerCases(env: CorpusEnv): HostileCase[] {
  const path = `/${env.bucket}/hdr`;
  const token = { "x-fence-token": env.token };
  const dup: Array<[string, Record<string, string | string[]>]> = [
    ["x-amz-content-sha256 twice", { "x-amz-content-sha256": ["UNSIGNED-PAYLOAD", sha256Hex("x")] }],
    ["x-amz-date twice", { "x-amz-date": ["20260101T000000Z", "20260101T000001Z"] }],
    ["x-fence-token twice, different", { "x-fence-token": [env.token, `${env.token}x`] }],
    ["x-amz-meta-fence-token beside a different x-fence-token", { "x-amz-meta-fence-token": "fg1.other" }],
    ["Content-MD5 twice", { "content-md5": ["1B2M2Y8AsgTpgAmY7PhCfg==", "1B2M2Y8AsgTpgAmY7PhCfg=="] }],
    ["x-amz-decoded-content-length twice", { "x-amz-decoded-content-length": ["1", "1"] }],
    [
      "x-amz-checksum-crc32 and crc32c",
      { "x-amz-checksum-crc32": "AAAAAA==", "x-amz-checksum-crc32c": "AAAAAA==" },
    ],
    ["malformed Content-MD5", { "content-md5": "not base64" }],
    ["malformed checksum", { "x-amz-checksum-sha256": "short" }],
    ["unknown checksum algorithm", { "x-amz-sdk-checksum-algorithm": "MD4" }],
    ["x-amz-trailer without chunked body", { "x-amz-trailer": "x-amz-checksum-crc32" }],
    ["unknown payload hash", { "x-amz-content-sha256": "STREAMING-EVIL" }],
    ["empty metadata name", { "x-amz-meta-": "x" }],
    [
      "metadata over 2 KiB",
      Object.fromEntries(Array.from({ length: 300 }, (_, i) => [`x-amz-meta-m${i}`, "vvvv"])),
    ],
    ["one metadata value of 4 KiB", { "x-amz-meta-big": "v".repeat(4096) }],
    ["bad canned ACL", { "x-amz-acl": "public-read-write-execute" }],
    ["grant header", { "x-amz-grant-full-control": 'uri="http://acs.amazonaws.com/groups/global/AllUsers"' }],
    [
      "bad metadata directive on copy",
      { "x-amz-copy-source": `${env.bucket}/seed/object`, "x-amz-metadata-directive": "MERGE" },
    ],
    ["copy source without key", { "x-amz-copy-source": env.bucket }],
    ["copy source bad escape", { "x-amz-copy-source": `${env.bucket}/%zz` }],
    ["copy source version", { "x-amz-copy-source": `${env.bucket}/seed/object?versionId=123` }],
    ["copy source missing object", { "x-amz-copy-source": `${env.bucket}/seed/nothing` }],
    ["copy source missing bucket", { "x-amz-copy-source": "no-such-bucket/k" }],
    ["If-Match that cannot match", { "if-match": '"00000000000000000000000000000000"' }],
  ];
  const cases: HostileCase[] = dup.map(([label, headers]) => ({
    name: `headers PUT: ${label}`,
    send: () =>
      signedThenRaw(
        { method: "PUT", path, body: "x", headers: { ...token, ...flatten(headers) } },
        undefined,
        headers,
      ),
    expect: refused(),
  }));
  const reads: Array<[string, Record<string, string>, HostileCase["expect"]]> = [
    ["Range garbage is ignored", { range: "bytes=zz-yy" }, { ok: [200] }],
    ["Range past the end", { range: "bytes=100000-200000" }, refused("InvalidRange", 416)],
    ["Range with many parts is ignored", { range: "bytes=0-1,2-3" }, { ok: [200] }],
    ["If-Match mismatch", { "if-match": '"nope"' }, refused("PreconditionFailed", 412)],
    ["If-None-Match match", { "if-none-match": "*" }, { ok: [304] }],
    ["If-Modified-Since garbage is ignored", { "if-modified-since": "yesterday" }, { ok: [200] }],
    ["checksum mode garbage is ignored", { "x-amz-checksum-mode": "MAYBE" }, { ok: [200] }],
    ["partNumber with Range", { range: "bytes=0-1" }, refused("InvalidRequest", 400)],
  ];
  for (const [label, headers, expect] of reads) {
    cases.push({
      name: `headers GET: ${label}`,
      send: () =>
        signed({
          method: "GET",
          path: `/${env.bucket}/seed/object`,
          headers,
          ...(label.startsWith("partNumber") ? { query: { partNumber: "1" } } : {}),
        }),
      expect,
    });
  }
  return cases;
}

function flatten(headers: Record<string, string | string[]>): Record<string, string> {
  return Object.fromEntries(Object.entries(headers).map(([k, v]) => [k, Array.isArray(v) ? v[0]! : v]));
}

/** Bucket names, methods and sub-resources that must be refused. */
export function miscCases(env: CorpusEnv): HostileCase[] {
  const cases: HostileCase[] = [];
  for (const name of [
    "Bad_Bucket",
    "ab",
    "-leading",
    "trailing-",
    "192.168.1.1",
    "a..b",
    "x".repeat(64),
    "xn--punycode",
    "bucket--x-s3",
    "%zz",
    "%FFbucket",
    "_underscore",
  ]) {
    cases.push({
      name: `bucket name ${name.slice(0, 20)}`,
      send: () => signed({ method: "PUT", path: `/${name}` }),
      expect: refused(),
    });
  }
  for (const method of ["PATCH", "OPTIONS", "PROPFIND", "MKCOL"]) {
    for (const path of ["/", `/${env.bucket}`, `/${env.bucket}/seed/object`]) {
      cases.push({
        name: `method ${method} ${path}`,
        send: () => signed({ method, path, headers: { "x-fence-token": env.token } }),
        expect: refused(),
      });
    }
  }
  const subresources: Array<[string, string, string, HostileCase["expect"]]> = [
    ["GET", `/${env.bucket}/seed/object`, "versionId=abc", refused("InvalidArgument")],
    ["DELETE", `/${env.bucket}/seed/object`, "versionId=abc", refused("InvalidArgument")],
    ["GET", `/${env.bucket}`, "list-type=2&max-keys=-1", refused("InvalidArgument")],
    ["GET", `/${env.bucket}`, "list-type=2&max-keys=1e3", refused("InvalidArgument")],
    ["GET", `/${env.bucket}`, "encoding-type=base64", refused("InvalidArgument")],
    ["GET", `/${env.bucket}`, "list-type=2&continuation-token=", { ok: [200] }],
    ["GET", `/${env.bucket}`, "list-type=2&continuation-token=bm9wZQ", refused("InvalidArgument")],
    ["GET", `/${env.bucket}`, "versions&version-id-marker=7", refused("InvalidArgument")],
    ["GET", `/${env.bucket}`, "uploads&max-uploads=abc", refused("InvalidArgument")],
    ["GET", `/${env.bucket}/seed/object`, "partNumber=abc", refused("InvalidArgument")],
    ["GET", `/${env.bucket}/seed/object`, "partNumber=0", refused("InvalidArgument")],
    ["GET", `/${env.bucket}/seed/object`, "partNumber=2", refused("InvalidPartNumber", 416)],
    ["HEAD", `/${env.bucket}/seed/object`, "partNumber=10001", refused(undefined, 400)],
    ["GET", `/${env.bucket}/seed/object`, "partNumber=1", { ok: [206] }],
    ["GET", `/${env.bucket}/seed/object`, "uploadId=nope", refused("NoSuchUpload")],
    ["GET", `/${env.bucket}/seed/object`, `uploadId=${env.uploadId}&max-parts=x`, refused("InvalidArgument")],
    [
      "GET",
      `/${env.bucket}/seed/object`,
      `uploadId=${env.uploadId}&part-number-marker=-1`,
      refused("InvalidArgument"),
    ],
    ["PUT", `/${env.bucket}/seed/object`, "uploadId=nope&partNumber=1", refused("NoSuchUpload")],
    [
      "PUT",
      `/${env.bucket}/seed/upload`,
      `uploadId=${env.uploadId}&partNumber=0`,
      refused("InvalidArgument"),
    ],
    [
      "PUT",
      `/${env.bucket}/seed/upload`,
      `uploadId=${env.uploadId}&partNumber=10001`,
      refused("InvalidArgument"),
    ],
    [
      "PUT",
      `/${env.bucket}/seed/upload`,
      `uploadId=${env.uploadId}&partNumber=abc`,
      refused("InvalidArgument"),
    ],
    ["POST", `/${env.bucket}/seed/object`, "uploadId=nope", refused("NoSuchUpload")],
    ["GET", `/${env.bucket}/seed/object`, "response-content-type=a%0D%0Ab", refused("InvalidArgument")],
    ["PUT", `/${env.bucket}`, "acl", refused("MalformedACLError")],
    ["GET", `/${env.bucket}`, "location&x-fence-token=%zz", refused("InvalidURI")],
  ];
  for (const [method, path, rawQuery, expect] of subresources) {
    cases.push({
      name: `subresource ${method} ${path.replace(env.bucket, "B")}?${rawQuery.replace(env.uploadId, "U").slice(0, 60)}`,
      send: () =>
        signed({
          method,
          path,
          rawQuery,
          body: method === "PUT" ? "x" : undefined,
          headers: { "x-fence-token": env.token },
        }),
      expect,
    });
  }
  cases.push({
    name: "copy-source-range garbage on UploadPartCopy",
    send: () =>
      signed({
        method: "PUT",
        path: `/${env.bucket}/seed/upload`,
        query: { uploadId: env.uploadId, partNumber: "2" },
        headers: {
          "x-fence-token": env.token,
          "x-amz-copy-source": `${env.bucket}/seed/object`,
          "x-amz-copy-source-range": "bytes=9-1",
        },
      }),
    expect: refused("InvalidArgument"),
  });
  return cases;
}

export function buildCorpus(env: CorpusEnv): HostileCase[] {
  return [
    ...keyCases(env),
    ...queryCases(env),
    ...xmlCases(env),
    ...chunkedCases(env),
    ...presignedCases(env),
    ...httpCases(env),
    ...headerCases(env),
    ...miscCases(env),
  ];
}
