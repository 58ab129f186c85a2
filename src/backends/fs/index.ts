export { createFsBackend, FsBackend, type FsBackendOptions } from "./fs-backend.js";
export { type RangeRequest, resolveRange } from "./range.js";
