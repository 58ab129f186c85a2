/**
 * fencegate's client SDK (`import { FenceClient } from "fencegate/client"`): signed calls to the
 * lease API with typed errors and safe retries, Lease handles that renew themselves and signal
 * their loss, `using()`, and the AWS SDK v3 binding of a lease's token to its writes: to one
 * command (`lease.bind(command)`), to a lease's view of a shared S3Client (`lease.s3(client)`),
 * or to a client of one lease (`fencingTokenPlugin`). Fenced transactions: `lease.transaction(fn)`
 * stages the writes `fn` sends through its `tx` and makes them visible all together on return.
 */
export {
  AccessDeniedError,
  AuthenticationError,
  describeLeaseLoss,
  FENCE_OUTCOME_HEADER,
  FenceApiError,
  type FenceApiErrorInit,
  FenceConnectionError,
  type HeldBy,
  InvalidRequestError,
  LeaseHeldError,
  type LeaseLossDetails,
  type LeaseLossReason,
  LeaseLostError,
  type LeaseLostErrorInit,
  LeaseNotFoundError,
  LeaseStoreUnavailableError,
  OutcomeUnknownError,
  StaleFencingTokenError,
  TransactionAbortedError,
  TransactionCommittedError,
  TransactionNotFoundError,
} from "./errors.js";
export { type CallOptions, FenceClient, type FenceClientOptions, type RetryOptions } from "./fence-client.js";
export { Lease, type LeaseApi, type LeaseOptions, type LeaseState } from "./lease.js";
export { explainLeaseLoss, type LeaseLossExplanation } from "./lease-loss.js";
export {
  BOUND_FENCING_TOKEN_NAME,
  bindFencingToken,
  type CommandSender,
  type CommandWithStack,
  FENCE_TOKEN_HEADER,
  FENCE_TRANSACTION_HEADER,
  FENCED_COMMANDS,
  FENCING_TOKEN_PLUGIN_NAME,
  FencingTokenConflictError,
  fencingTokenClient,
  fencingTokenPlugin,
  type TokenHolder,
  type TokenSource,
} from "./s3-plugin.js";
export {
  Transaction,
  type TransactionApi,
  type TransactionHandleState,
  type TransactionResult,
} from "./transaction.js";
export {
  fetchTransport,
  nodeHttpTransport,
  type Transport,
  type TransportRequest,
  type TransportResponse,
} from "./transport.js";
export type {
  AcquireRequest,
  AuditQuery,
  AuditRecord,
  LeaseRecord,
  LeaseResource,
  LeaseView,
  TransactionCommit,
  TransactionObject,
  TransactionRecord,
  TransactionState,
  TransactionView,
} from "./types.js";
