import type * as wire from "./wire.js";

/**
 * The lease API's messages, as the client SDK sends and receives them: the types of the API's
 * own schemas (src/api/schemas.ts), written out in ./wire.ts by scripts/generate-openapi.ts so
 * that the client needs neither zod nor the server.
 */

/** A lease as the lease API sends it to the access key that holds it: with its fencing token. */
export type LeaseRecord = wire.Lease & { fencingToken: string };

/**
 * A lease as another access key sees it (GET and list): without its fencing token, which only
 * the key that acquired it, its delegates and administrators are shown.
 */
export type LeaseView = wire.Lease;

/** What to lease: one key, or every key under a prefix, of a bucket. */
export type LeaseResource = Pick<wire.AcquireRequest, "bucket" | "key" | "prefix">;

export type {
  AcquireRequest,
  AuditQuery,
  AuditRecord,
  Claim,
  Delegate,
  HeldBy,
  NewDelegate,
  NewTransaction as TransactionRecord,
  Transaction as TransactionView,
  TransactionCommit,
  TransactionObject,
} from "./wire.js";

export type TransactionState = wire.Transaction["state"];
