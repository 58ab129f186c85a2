export { type RangeRequest, resolveRange } from "../range.js";
export { createFsBackend, FsBackend, type FsBackendOptions, INLINE_MAX_BYTES } from "./fs-backend.js";
export { type FsMultipartOptions, FsMultipartStore } from "./multipart-store.js";
