import type { ObjectInfo } from "../../backends/storage-backend.js";
import { DomainError } from "../../core/errors.js";
import { header, type S3Request } from "../protocol/context.js";

/**
 * GET and HEAD with `partNumber`, as far as this gateway can honestly serve it: part 1 of an
 * object uploaded in one piece, or in one part, is the whole object (S3 answers 206 with its
 * Content-Range).
 * Parts of a multipart object would need their boundaries, which storage does not record: they
 * are refused with NotImplemented, and numbers past the part count (known from the ETag's `-N`)
 * with S3's InvalidPartNumber.
 */

/** The partNumber of a GET or HEAD, validated before anything is read; undefined when absent. */
export function partNumberRead(req: S3Request): number | undefined {
  const raw = req.query.get("partNumber");
  if (raw === null) return undefined;
  const n = /^\d{1,5}$/.test(raw) ? Number(raw) : Number.NaN;
  if (!(n >= 1 && n <= 10_000)) {
    throw new DomainError(
      "InvalidArgument",
      "Part number must be an integer between 1 and 10000, inclusive",
      {
        ArgumentName: "partNumber",
        ArgumentValue: raw.slice(0, 64),
      },
    );
  }
  if (header(req, "range") !== undefined) {
    throw new DomainError(
      "InvalidRequest",
      "Cannot specify both Range header and partNumber query parameter",
    );
  }
  return n;
}

/** Refuses a part this gateway cannot serve; returns when the part is the whole object. */
export function checkServablePart(info: ObjectInfo, partNumber: number): void {
  const count = partsCount(info.etag);
  if (partNumber > (count ?? 1)) {
    throw new DomainError("InvalidPartNumber", "The requested partnumber is not satisfiable", {
      PartNumberRequested: partNumber,
      ActualPartCount: count ?? 1,
    });
  }
  // A multipart object of one part is that part; with more, where part 2 begins is not known.
  if (count !== undefined && count > 1) {
    throw new DomainError(
      "NotImplemented",
      "Reading one part of a multipart object is not implemented by fencegate: its storage does not record where the parts begin.",
    );
  }
}

/** Headers of an answer with part 1 of a single-part object: 206 with the whole range, as S3 answers. */
export function wholeObjectAsPart(info: ObjectInfo, headers: Record<string, string>): number {
  headers["content-length"] = String(info.size);
  const count = partsCount(info.etag);
  if (count !== undefined) headers["x-amz-mp-parts-count"] = String(count);
  if (info.size === 0) return 200;
  headers["content-range"] = `bytes 0-${info.size - 1}/${info.size}`;
  return 206;
}

/** The part count of a multipart ETag (`"<hex>-N"`); undefined for an object stored in one piece. */
function partsCount(etag: string): number | undefined {
  const m = /-(\d+)"?$/.exec(etag);
  return m ? Number(m[1]) : undefined;
}
