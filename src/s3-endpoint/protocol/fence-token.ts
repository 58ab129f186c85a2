import { DomainError } from "../../core/errors.js";
import { header, type S3Request } from "./context.js";

const FENCE_TOKEN_HEADER = "x-fence-token";
export const FENCE_TOKEN_META_HEADER = "x-amz-meta-fence-token";

/**
 * The fencing token a write carries: the x-fence-token header, the fence-token user-metadata
 * header (for tools that can only set metadata), or the x-fence-token or x-amz-meta-fence-token
 * query parameter (presigned URLs: the AWS SDK presigner hoists metadata headers into the query;
 * the signature covers every query parameter). Two different tokens on one request are refused.
 */
export function fenceTokenOf(req: Pick<S3Request, "headers" | "query">): string | null {
  return carried(req, FENCE_TOKEN_HEADER, FENCE_TOKEN_META_HEADER, () => {
    throw new DomainError("InvalidFencingToken", "the request carries more than one different fencing token");
  });
}

const FENCE_TRANSACTION_HEADER = "x-fence-transaction";
export const FENCE_TRANSACTION_META_HEADER = "x-amz-meta-fence-transaction";

/**
 * The fenced transaction a request joins (a write) or reads in (a GET or HEAD): the
 * x-fence-transaction header, the fence-transaction user metadata, or either as a query
 * parameter (presigned URLs), as for the token. Two different ones are refused.
 */
export function fenceTransactionOf(req: Pick<S3Request, "headers" | "query">): string | null {
  return carried(req, FENCE_TRANSACTION_HEADER, FENCE_TRANSACTION_META_HEADER, () => {
    throw new DomainError("InvalidArgument", "the request names more than one different transaction", {
      ArgumentName: FENCE_TRANSACTION_HEADER,
    });
  });
}

/** One value given as a header, a metadata header or either as a query parameter; `twice` refuses two. */
function carried(
  req: Pick<S3Request, "headers" | "query">,
  name: string,
  metaName: string,
  twice: () => never,
): string | null {
  const found = new Set<string>();
  for (const v of [header(req, name), header(req, metaName)]) {
    if (v !== undefined) found.add(v.trim());
  }
  for (const q of [name, metaName]) {
    for (const v of req.query.getAll(q)) found.add(v.trim());
  }
  if (found.size > 1) twice();
  const [only] = found;
  return only === undefined ? null : only;
}
