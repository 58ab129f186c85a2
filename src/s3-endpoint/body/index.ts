export type { BodyDigestResult } from "./body-digest.js";
export {
  CHECKSUM_ALGORITHMS,
  type ChecksumAlgorithm,
  checksumHeaderName,
  createHasher,
} from "./checksum-algorithms.js";
export { crc32c } from "./crc32c.js";
export { Crc64Nvme, crc64nvme } from "./crc64nvme.js";
export {
  type BodyAuth,
  type DecodedRequestBody,
  type DecodeRequestBodyOptions,
  decodeRequestBody,
} from "./decode-request-body.js";
