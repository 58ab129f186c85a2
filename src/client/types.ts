/** The lease API's messages, as the client SDK sends and receives them (src/api/openapi.json). */

/** A lease as the lease API sends it. */
export type LeaseRecord = {
  leaseId: string;
  bucket: string;
  key?: string;
  prefix?: string;
  owner: string;
  /** The fencing token number: unique, strictly increasing in grant order. */
  token: number;
  /** The signed string a write carries (header `x-fence-token`); opaque. */
  fencingToken: string;
  ttlMs: number;
  acquiredAt: string;
  expiresAt: string;
  state: "active" | "expired" | "released";
};

/**
 * A lease as another access key sees it (GET and list): without its fencing token, which only
 * the key that acquired it, its delegates and administrators are shown.
 */
export type LeaseView = Omit<LeaseRecord, "fencingToken"> & { fencingToken?: string; waiters?: number };

/** What to lease: one key, or every key under a prefix, of a bucket. */
export type LeaseResource = { bucket: string; key?: string; prefix?: string };

export type AcquireRequest = LeaseResource & {
  ttlMs: number;
  /** How long to wait for an overlapping lease to end (default 0: answer LeaseHeld at once). */
  waitMs?: number;
  /** A name for the holder (default: the access key id). */
  owner?: string;
};

export type AuditRecord = {
  seq: number;
  time: string;
  op: string;
  bucket: string | null;
  key: string | null;
  prefix?: string | null;
  token: number | null;
  leaseId: string | null;
  owner?: string | null;
  principal: string | null;
  decision: "accepted" | "rejected" | "unknown";
  reason: string | null;
  highestToken: number | null;
  requestId: string | null;
  gateway: string;
  /** The fenced transaction the record belongs to; absent outside a transaction. */
  transactionId?: string;
  /** The keys of a transaction's commit or abort (TransactionCommitted, TransactionAborted). */
  keys?: string[];
};

export type AuditQuery = {
  bucket?: string;
  key?: string;
  prefix?: string;
  leaseId?: string;
  /** Records of this fenced transaction: its staged writes and its commit or abort. */
  transactionId?: string;
  decision?: string;
  op?: string;
  since?: string;
  until?: string;
  limit?: string | number;
  cursor?: string;
};

/** A delegate of a lease: an access key that may renew it and write with its token, never release it. */
export type Delegate = {
  delegateId: string;
  /** The delegate's access key id (SigV4). */
  accessKeyId: string;
  leaseId: string;
  /** The access key that created it. */
  createdBy: string;
  createdAt: string;
};

/** A new delegate with its secret (shown only once): hand both to the worker. */
export type NewDelegate = Delegate & { secretAccessKey: string };

/** A transaction as the lease API answers its opening (POST …/leases/{leaseId}/transactions). */
export type TransactionRecord = {
  transactionId: string;
  leaseId: string;
  /** The lease's token number: the one every write of the transaction carries. */
  token: number;
  bucket: string;
  /** When the transaction ends (aborted) unless committed: it ends with its lease. */
  expiresAt: string;
};

/** One object of a transaction: a write (its ETag) or a delete. */
export type TransactionObject = { key: string; etag: string } | { key: string; deleted: true };

export type TransactionState = "open" | "committed" | "aborted";

/** GET /_fence/v1/transactions/{id}. */
export type TransactionView = TransactionRecord & {
  state: TransactionState;
  objects: TransactionObject[];
  /** Why it was aborted (e.g. LeaseLost, StaleFencingToken), when it was. */
  reason?: string;
};

/**
 * The answer of a commit (POST /_fence/v1/transactions/{id}/commit): every object of the
 * transaction is now visible, each with the token it was written with.
 */
export type TransactionCommit = {
  transactionId: string;
  token: number;
  objects: TransactionObject[];
};
