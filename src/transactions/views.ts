/** A fenced transaction as the lease API shows it, on any backend. */

export type TransactionState = "open" | "committed" | "aborted";

/** A staged or committed object, as the API shows it. */
export type TransactionObject = { key: string; etag: string } | { key: string; deleted: true };

export type TransactionView = {
  transactionId: string;
  leaseId: string;
  token: number;
  bucket: string;
  state: TransactionState;
  expiresAt: string;
  objects: TransactionObject[];
  /** Why it was aborted (an error code, or "ClientAbort"). */
  reason?: string;
};

export type CommitAnswer = { transactionId: string; token: number; objects: TransactionObject[] };
