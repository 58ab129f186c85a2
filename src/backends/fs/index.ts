export { createFsBackend, FsBackend, type FsBackendOptions, INLINE_MAX_BYTES } from "./fs-backend.js";
