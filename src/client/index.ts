/**
 * fencegate's client SDK (`import { FenceClient } from "fencegate/client"`): signed calls to the
 * lease API with typed errors and safe retries, Lease handles that renew themselves and signal
 * their loss, `using()`, and an AWS SDK v3 plugin that puts the lease's token on every write.
 */
export {
  AccessDeniedError,
  AuthenticationError,
  FenceApiError,
  type FenceApiErrorInit,
  FenceConnectionError,
  type HeldBy,
  InvalidRequestError,
  LeaseHeldError,
  LeaseLostError,
  LeaseNotFoundError,
  LeaseStoreUnavailableError,
} from "./errors.js";
export { type CallOptions, FenceClient, type FenceClientOptions, type RetryOptions } from "./fence-client.js";
export { Lease, type LeaseApi, type LeaseOptions, type LeaseState } from "./lease.js";
export { FENCE_TOKEN_HEADER, FENCED_COMMANDS, fencingTokenPlugin, type TokenSource } from "./s3-plugin.js";
export type {
  AcquireRequest,
  AuditQuery,
  AuditRecord,
  LeaseRecord,
  LeaseResource,
  LeaseView,
} from "./types.js";
