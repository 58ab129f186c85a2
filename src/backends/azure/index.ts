/**
 * The Azure Blob Storage backend (also ADLS Gen2 through its Blob endpoint). The design is
 * described at the top of azure-backend.ts.
 *
 * Azure blob leases are deliberately not used. Every write through the gateway already commits
 * with a compare-and-swap on the blob's ETag that checks the HCT, so a blob lease would add no
 * safety there. It would not stop writers that bypass the gateway either, except while held:
 * blob leases last 15-60 s or forever, cover one existing blob (no prefixes, no keys that do not
 * exist yet), and their lease id would have to be shared by every gateway replica and survive
 * gateway crashes (an infinite lease left behind blocks the key until someone breaks it). Keep
 * direct writers out with Azure RBAC or SAS permissions instead. A lease taken by someone else
 * makes fencegate's writes fail with ServiceUnavailable naming the lease.
 */
export { AzureBackend, createAzureBackend } from "./azure-backend.js";
export type { AzureBackendOptions, AzureHookStep, AzureHooks } from "./azure-options.js";
