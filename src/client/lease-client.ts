/**
 * The names the gateway's own tests and tools used before the SDK (fencegate/client) existed:
 * the same client and error under their earlier names, and the wire lease as `Lease`.
 */
export { FenceApiError as LeaseApiError } from "./errors.js";
export { FenceClient as LeaseClient, type FenceClientOptions as LeaseClientOptions } from "./fence-client.js";
export type { LeaseRecord as Lease } from "./types.js";
