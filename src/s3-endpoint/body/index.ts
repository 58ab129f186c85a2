export { CHECKSUM_ALGORITHMS, type ChecksumAlgorithm, checksumHeaderName } from "./checksum-algorithms.js";
export { decodeRequestBody } from "./decode-request-body.js";
