import { createHmac, timingSafeEqual } from "node:crypto";

/**
 * Fencing token strings: `fg1.<keyId>.<claims, base64url JSON>.<HMAC-SHA256, base64url>`.
 * The claims name the lease, its token number and the resource it covers, so the scope is
 * checked without a store lookup; the MAC makes any change detectable. The key id selects
 * the verification key, so keys can be rotated: sign with the active key, verify with any
 * key still listed.
 */

export type TokenClaims = {
  leaseId: string;
  token: number;
  bucket: string;
  key?: string;
  prefix?: string;
};

export type SigningKey = { id: string; secret: Buffer };

export type Keyring = {
  /** Signs new tokens. */
  active: SigningKey;
  /** Every key accepted for verification, by id (includes the active one). */
  byId: ReadonlyMap<string, Buffer>;
};

type VerifyResult = { ok: true; claims: TokenClaims } | { ok: false; reason: string };

const VERSION = "fg1";
const MAX_TOKEN_LENGTH = 4096;
const KEY_ID = /^[A-Za-z0-9_-]{1,64}$/;
const B64URL = /^[A-Za-z0-9_-]+$/;

export function makeKeyring(keys: SigningKey[], activeId?: string): Keyring {
  if (keys.length === 0) throw new Error("at least one token-signing key is required");
  for (const k of keys) {
    if (!KEY_ID.test(k.id)) throw new Error(`token-signing key id "${k.id}" must match ${KEY_ID}`);
    if (k.secret.length < 16) throw new Error(`token-signing key "${k.id}" must be at least 16 bytes`);
  }
  const active = activeId ? keys.find((k) => k.id === activeId) : keys[0];
  if (!active) throw new Error(`active token-signing key "${activeId}" is not among the configured keys`);
  return { active, byId: new Map(keys.map((k) => [k.id, k.secret])) };
}

export function signFencingToken(claims: TokenClaims, key: SigningKey): string {
  const body = { l: claims.leaseId, t: claims.token, b: claims.bucket, k: claims.key, p: claims.prefix };
  const payload = Buffer.from(JSON.stringify(body)).toString("base64url");
  const signed = `${VERSION}.${key.id}.${payload}`;
  return `${signed}.${mac(key.secret, signed).toString("base64url")}`;
}

export function verifyFencingToken(token: string, keyring: Keyring): VerifyResult {
  if (typeof token !== "string" || token.length === 0 || token.length > MAX_TOKEN_LENGTH) {
    return fail("token is empty or too long");
  }
  const parts = token.split(".");
  if (parts.length !== 4) return fail("token is malformed");
  const [version, keyId, payload, signature] = parts as [string, string, string, string];
  if (version !== VERSION) return fail("token version is not supported");
  if (!KEY_ID.test(keyId) || !B64URL.test(payload) || !B64URL.test(signature))
    return fail("token is malformed");
  const secret = keyring.byId.get(keyId);
  if (!secret) return fail(`token is signed with an unknown key "${keyId}"`);
  // Compare the canonical base64url text, not the decoded bytes: decoding ignores the unused
  // low bits of the last character, so several strings would carry the same MAC and a changed
  // token would still verify. Constant time; a length mismatch leaks nothing useful.
  const expected = Buffer.from(mac(secret, `${version}.${keyId}.${payload}`).toString("base64url"));
  const given = Buffer.from(signature);
  if (given.length !== expected.length || !timingSafeEqual(given, expected)) {
    return fail("token signature does not match");
  }
  const claims = parseClaims(payload);
  return claims ? { ok: true, claims } : fail("token claims are malformed");
}

function parseClaims(payload: string): TokenClaims | null {
  let raw: unknown;
  try {
    raw = JSON.parse(Buffer.from(payload, "base64url").toString("utf8"));
  } catch {
    return null;
  }
  if (typeof raw !== "object" || raw === null) return null;
  const { l, t, b, k, p } = raw as Record<string, unknown>;
  if (typeof l !== "string" || typeof b !== "string" || !Number.isSafeInteger(t) || (t as number) < 1) {
    return null;
  }
  const hasKey = typeof k === "string";
  const hasPrefix = typeof p === "string";
  if (hasKey === hasPrefix) return null;
  return {
    leaseId: l,
    token: t as number,
    bucket: b,
    ...(hasKey ? { key: k as string } : { prefix: p as string }),
  };
}

function mac(secret: Buffer, data: string): Buffer {
  return createHmac("sha256", secret).update(data).digest();
}

function fail(reason: string): VerifyResult {
  return { ok: false, reason };
}
