import { DomainError } from "../../core/errors.js";
import { header, type S3Request } from "./context.js";

export const FENCE_TOKEN_HEADER = "x-fence-token";
export const FENCE_TOKEN_META_HEADER = "x-amz-meta-fence-token";
export const FENCE_TOKEN_QUERY = "x-fence-token";

/**
 * The fencing token a write carries: the x-fence-token header, the fence-token user-metadata
 * header (for tools that can only set metadata), or the x-fence-token or x-amz-meta-fence-token
 * query parameter (presigned URLs: the AWS SDK presigner hoists metadata headers into the query;
 * the signature covers every query parameter). Two different tokens on one request are refused.
 */
export function fenceTokenOf(req: Pick<S3Request, "headers" | "query">): string | null {
  const found = new Set<string>();
  for (const v of [header(req, FENCE_TOKEN_HEADER), header(req, FENCE_TOKEN_META_HEADER)]) {
    if (v !== undefined) found.add(v.trim());
  }
  for (const name of [FENCE_TOKEN_QUERY, FENCE_TOKEN_META_HEADER]) {
    for (const v of req.query.getAll(name)) found.add(v.trim());
  }
  if (found.size > 1) {
    throw new DomainError("InvalidFencingToken", "the request carries more than one different fencing token");
  }
  const [only] = found;
  return only === undefined ? null : only;
}
