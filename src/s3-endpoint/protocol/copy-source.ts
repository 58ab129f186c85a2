import { DomainError } from "../../core/errors.js";
import { assertValidObjectKey } from "../../core/key-rules.js";
import { header, type S3Request } from "./context.js";

/** x-amz-copy-source: `bucket/key` or `/bucket/key`, URL-encoded, optionally `?versionId=null`. */
export function copySource(req: S3Request): { bucket: string; key: string } {
  const raw = header(req, "x-amz-copy-source");
  if (!raw) throw new DomainError("InvalidArgument", "Copy Source must mention the source bucket and key");
  const [pathPart = "", query = ""] = raw.split("?", 2);
  const versionId = new URLSearchParams(query).get("versionId");
  if (versionId !== null && versionId !== "null") {
    throw new DomainError("InvalidArgument", "Invalid version id specified");
  }
  let decoded: string;
  try {
    decoded = decodeURIComponent(pathPart);
  } catch {
    throw new DomainError("InvalidArgument", "Invalid copy source encoding");
  }
  const path = decoded.startsWith("/") ? decoded.slice(1) : decoded;
  const slash = path.indexOf("/");
  if (slash <= 0 || slash === path.length - 1) {
    throw new DomainError(
      "InvalidArgument",
      "Copy Source must mention the source bucket and key: sourcebucket/sourcekey",
    );
  }
  const key = path.slice(slash + 1);
  assertValidObjectKey(key);
  return { bucket: path.slice(0, slash), key };
}
