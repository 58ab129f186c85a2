import { createHash } from "node:crypto";

/** The one digest helper of the tests: the MD5, SHA-1 or SHA-256 of some bytes, hex (default) or base64. */
export function digest(
  algorithm: "md5" | "sha1" | "sha256",
  data: string | Uint8Array,
  encoding: "hex" | "base64" = "hex",
): string {
  return createHash(algorithm).update(data).digest(encoding);
}

export const md5Hex = (data: string | Uint8Array): string => digest("md5", data);
export const sha256Hex = (data: string | Uint8Array): string => digest("sha256", data);
