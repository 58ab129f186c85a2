export { OutcomeUnknownError } from "../../fence/commit-driver.js";
export { createS3Backend } from "./open.js";
export type { S3BackendOptions, S3CommitHooks, S3CommitStep } from "./options.js";
export { S3Backend } from "./s3-backend.js";
