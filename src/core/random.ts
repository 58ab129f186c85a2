import { randomFillSync } from "node:crypto";

/**
 * Random bytes for ids made on every request, drawn from a pool refilled 4 KiB at a time (as
 * randomUUID does): one call into the system's generator per few hundred ids instead of one
 * per id. Every byte is used once, from the same cryptographic generator as randomBytes.
 */
const pool = Buffer.alloc(4096);
let used = pool.length;

function take(bytes: number): Buffer {
  if (bytes > pool.length) throw new RangeError(`at most ${pool.length} random bytes at a time`);
  if (used + bytes > pool.length) {
    randomFillSync(pool);
    used = 0;
  }
  const out = pool.subarray(used, used + bytes);
  used += bytes;
  return out;
}

export const randomHex = (bytes: number): string => take(bytes).toString("hex");

export const randomBase64url = (bytes: number): string => take(bytes).toString("base64url");
