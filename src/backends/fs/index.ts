export { createFsBackend, FsBackend, type FsBackendOptions } from "./fs-backend.js";
export { type FsMultipartOptions, FsMultipartStore } from "./multipart-store.js";
export { type RangeRequest, resolveRange } from "./range.js";
