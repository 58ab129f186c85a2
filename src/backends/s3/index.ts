export { OutcomeUnknownError } from "../../fence/commit-driver.js";
export type { CapabilityReport } from "./capability.js";
export type { GarbageReport } from "./garbage.js";
export { createS3Backend } from "./open.js";
export type { S3BackendOptions, S3CommitHookInfo, S3CommitHooks, S3CommitStep } from "./options.js";
export { S3Backend } from "./s3-backend.js";
export { S3MultipartStore } from "./s3-multipart.js";
