import type { IncomingHttpHeaders } from "node:http";
import type { Readable } from "node:stream";
import type { StorageBackend } from "../backends/storage-backend.js";
import type { WriteFencer } from "../fence/write-fencer.js";
import type { Logger } from "../log.js";
import { headerValue } from "./auth/index.js";
import type { XmlNode } from "./xml.js";

export type S3Services = {
  backend: StorageBackend;
  fencer: WriteFencer;
};

/** An authenticated S3 request, addressed and ready for its operation. */
export type S3Request = {
  requestId: string;
  method: string;
  bucket: string | null;
  key: string | null;
  query: URLSearchParams;
  headers: IncomingHttpHeaders;
  /** The raw request body (still framed as sent); operations decode it through decodeBody. */
  body: Readable;
  principal: string;
  /** Decodes and verifies the body per x-amz-content-sha256, trailers and checksum headers. */
  decodeBody: () => DecodedBody;
  log: Logger;
};

export type DecodedBody = {
  stream: Readable;
  done: Promise<{ md5Hex?: string; size: number; checksums: Record<string, string> }>;
};

/** What an operation answers: a status, headers, and an XML document or a byte stream. */
export type S3Response = {
  status: number;
  headers?: Record<string, string>;
  xml?: { root: string; body: XmlNode };
  stream?: Readable;
};

export type S3Operation = (req: S3Request, services: S3Services) => Promise<S3Response>;

export function header(req: Pick<S3Request, "headers">, name: string): string | undefined {
  return headerValue(req.headers, name);
}
