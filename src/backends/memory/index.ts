export { createMemoryBackend, MemoryBackend, type MemoryBackendOptions } from "./memory-backend.js";
export { type MemoryMultipartOptions, MemoryMultipartStore } from "./memory-multipart.js";
