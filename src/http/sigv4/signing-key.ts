import { createHmac } from "node:crypto";

const MAX_CACHED_KEYS = 512;
const cache = new Map<string, Buffer>();

export const hmacSha256 = (key: Buffer | string, data: string | Buffer): Buffer =>
  createHmac("sha256", key).update(data).digest();

/**
 * SigV4 signing key. Derivation costs four HMACs per request; the key only changes per day,
 * region and secret, so it is cached (bounded, oldest entry evicted first).
 */
export function deriveSigningKey(secret: string, date: string, region: string, service: string): Buffer {
  const id = `${date}\n${region}\n${service}\n${secret}`;
  const hit = cache.get(id);
  if (hit) return hit;
  const kDate = hmacSha256(`AWS4${secret}`, date);
  const kRegion = hmacSha256(kDate, region);
  const kService = hmacSha256(kRegion, service);
  const key = hmacSha256(kService, "aws4_request");
  if (cache.size >= MAX_CACHED_KEYS) {
    const oldest = cache.keys().next().value;
    if (oldest !== undefined) cache.delete(oldest);
  }
  cache.set(id, key);
  return key;
}
