import { DomainError } from "../core/errors.js";
import type { Fence } from "./commit.js";

/** What the fencing rule of a multipart upload needs to know about it. */
type UploadFencing = { uploadId: string; token: number | null };

/**
 * The fencing rule for parts and completion: the request's fence must be the one the upload
 * was created with. A lower token never gets here (its lease was superseded by the upload's,
 * so the lease check refuses it first); a higher or different token belongs to another lease,
 * which does not cover this upload, and retrying with it can never succeed: start a new upload.
 */
export function assertUploadFence(upload: UploadFencing, fence: Fence): void {
  const token = fence?.token ?? null;
  if (upload.token === null && token === null) return;
  if (token === null) {
    throw new DomainError(
      "FencingTokenRequired",
      "this multipart upload was created under a lease; its parts and its completion must carry that lease's fencing token",
      { uploadId: upload.uploadId },
    );
  }
  if (token !== upload.token) {
    throw new DomainError(
      "FencingTokenScopeMismatch",
      upload.token === null
        ? "this multipart upload was created without a fencing token; a lease's token does not cover it"
        : `this multipart upload is bound to fencing token ${upload.token}, not ${token}`,
      { uploadId: upload.uploadId, token },
    );
  }
}
