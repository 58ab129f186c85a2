import type { IncomingHttpHeaders } from "node:http";
import type { Readable } from "node:stream";
import type { AccessPolicy } from "../../access/access-policy.js";
import type { StorageBackend, VerifiedBody } from "../../backends/storage-backend.js";
import type { Logger } from "../../core/log.js";
import type { WriteFencer } from "../../fence/write-fencer.js";
import { headerValue } from "../../http/sigv4/index.js";
import type { XmlNode } from "./xml.js";

export type S3Services = {
  backend: StorageBackend;
  fencer: WriteFencer;
  /** What each access key may read and write (src/access/access-policy.ts). */
  access: AccessPolicy;
  /** The region the gateway answers as (server.region). */
  region: string;
  /** Multipart uploads this gateway completed lately, for retried completions (none: not answered). */
  completions?: CompletedUploads;
};

/** What a retried CompleteMultipartUpload needs to know about a completion that succeeded. */
export type CompletedUpload = { bucket: string; key: string; etag: string; token: number | null };

export type CompletedUploads = {
  remember(uploadId: string, completed: CompletedUpload): void;
  recall(uploadId: string): CompletedUpload | undefined;
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
  /** Authenticated by a presigned URL: its x-amz-* query parameters stand for headers. */
  presigned: boolean;
  /** The region the request was signed for (the gateway answers in every region). */
  signingRegion: string;
  /**
   * Decodes and verifies the body per x-amz-content-sha256, trailers and checksum headers. With
   * `objectChecksums: false` the x-amz-checksum-* headers are left out: on CompleteMultipartUpload
   * they describe the object being assembled, not the XML body.
   */
  decodeBody: (opts?: { objectChecksums?: boolean }) => VerifiedBody;
  /** Aborted when the client goes away before the answer is sent. */
  signal: AbortSignal;
  log: Logger;
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
