import { createHmac, randomBytes } from "node:crypto";
import { describe, expect, it } from "vitest";
import {
  type Keyring,
  makeKeyring,
  type SigningKey,
  signFencingToken,
  type TokenClaims,
  verifyFencingToken,
} from "../../src/fence/tokens.js";

const keyA: SigningKey = { id: "key-a", secret: Buffer.from("0123456789abcdef0123456789abcdef") };
const keyB: SigningKey = { id: "key_b", secret: randomBytes(32) };
const ring = makeKeyring([keyA]);

const keyClaims: TokenClaims = { leaseId: "lease-1", token: 42, bucket: "b", key: "dir/file.txt" };
const prefixClaims: TokenClaims = { leaseId: "lease-2", token: 43, bucket: "b", prefix: "dir/" };

function expectInvalid(token: string, keyring: Keyring = ring, reason?: RegExp) {
  let result: ReturnType<typeof verifyFencingToken> | undefined;
  expect(() => {
    result = verifyFencingToken(token, keyring);
  }).not.toThrow();
  expect(result?.ok, `accepted: ${JSON.stringify(token).slice(0, 200)}`).toBe(false);
  if (reason && result && !result.ok) expect(result.reason).toMatch(reason);
}

/** A token with arbitrary claims JSON, correctly MAC'ed with keyA (tests claim validation). */
function signRaw(claimsJson: string, key: SigningKey = keyA): string {
  const payload = Buffer.from(claimsJson).toString("base64url");
  const signed = `fg1.${key.id}.${payload}`;
  return `${signed}.${createHmac("sha256", key.secret).update(signed).digest("base64url")}`;
}

describe("sign and verify", () => {
  it("round-trips a key lease's claims", () => {
    const token = signFencingToken(keyClaims, keyA);
    expect(token.startsWith("fg1.key-a.")).toBe(true);
    expect(verifyFencingToken(token, ring)).toEqual({ ok: true, claims: keyClaims });
  });

  it("round-trips a prefix lease's claims, including the empty prefix", () => {
    expect(verifyFencingToken(signFencingToken(prefixClaims, keyA), ring)).toEqual({
      ok: true,
      claims: prefixClaims,
    });
    const all: TokenClaims = { leaseId: "l", token: 1, bucket: "b", prefix: "" };
    expect(verifyFencingToken(signFencingToken(all, keyA), ring)).toEqual({ ok: true, claims: all });
  });

  it("round-trips keys with unicode, dots and the largest safe token number", () => {
    const claims: TokenClaims = {
      leaseId: "l.with.dots",
      token: Number.MAX_SAFE_INTEGER,
      bucket: "b.b",
      key: "ü/ñ/.../😀 x.y",
    };
    expect(verifyFencingToken(signFencingToken(claims, keyA), ring)).toEqual({ ok: true, claims });
  });

  it("produces different tokens for different claims and keys", () => {
    const t1 = signFencingToken(keyClaims, keyA);
    expect(signFencingToken({ ...keyClaims, token: 43 }, keyA)).not.toBe(t1);
    expect(signFencingToken({ ...keyClaims, key: "dir/file.txu" }, keyA)).not.toBe(t1);
    expect(signFencingToken(keyClaims, { id: "key-a", secret: randomBytes(32) })).not.toBe(t1);
  });
});

describe("any change invalidates the token", () => {
  const token = signFencingToken(keyClaims, keyA);

  it("fails for every single-bit flip of every character", () => {
    let tried = 0;
    for (let i = 0; i < token.length; i++) {
      for (let bit = 0; bit < 7; bit++) {
        const flipped = String.fromCharCode(token.charCodeAt(i) ^ (1 << bit));
        const changed = token.slice(0, i) + flipped + token.slice(i + 1);
        expectInvalid(changed);
        tried++;
      }
    }
    expect(tried).toBe(token.length * 7);
  });

  it("fails for every replacement of a character by another base64url character", () => {
    const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    for (let i = 0; i < token.length; i++) {
      if (token[i] === ".") continue;
      for (const c of alphabet) {
        if (c === token[i]) continue;
        expectInvalid(token.slice(0, i) + c + token.slice(i + 1));
      }
    }
  });

  it("fails when characters are removed, added or the parts reordered", () => {
    for (let i = 0; i < token.length; i++) expectInvalid(token.slice(0, i) + token.slice(i + 1));
    expectInvalid(`${token}A`);
    expectInvalid(`A${token}`);
    expectInvalid(`${token}=`);
    const [v, k, p, m] = token.split(".");
    expectInvalid([v, k, m, p].join("."));
    expectInvalid([v, k, p, m, m].join("."));
  });

  it("fails when the claims are swapped for another token's claims", () => {
    const other = signFencingToken({ ...keyClaims, token: 99 }, keyA);
    const [v, k, , m] = token.split(".");
    const [, , p2] = other.split(".");
    expectInvalid([v, k, p2, m].join("."), ring, /signature/);
  });

  it("fails for a token signed with another key under the same id (forgery)", () => {
    const forged = signFencingToken(keyClaims, { id: "key-a", secret: randomBytes(32) });
    expectInvalid(forged, ring, /signature/);
  });
});

describe("key ids and rotation", () => {
  it("refuses a token signed with an unknown key id", () => {
    const token = signFencingToken(keyClaims, keyB);
    expectInvalid(token, ring, /unknown key "key_b"/);
  });

  it("verifies an old key's tokens while the key is listed, and not once it is removed", () => {
    const old = makeKeyring([keyA]);
    const token = signFencingToken(keyClaims, old.active);
    expect(old.active.id).toBe("key-a");

    // Rotation: the new key signs, the old one still verifies.
    const rotated = makeKeyring([keyB, keyA], "key_b");
    expect(rotated.active.id).toBe("key_b");
    expect(verifyFencingToken(token, rotated)).toEqual({ ok: true, claims: keyClaims });
    const fresh = signFencingToken(keyClaims, rotated.active);
    expect(fresh.split(".")[1]).toBe("key_b");
    expect(verifyFencingToken(fresh, rotated).ok).toBe(true);
    // The old ring does not know the new key.
    expectInvalid(fresh, old, /unknown key/);

    // The old key retired.
    const retired = makeKeyring([keyB]);
    expectInvalid(token, retired, /unknown key "key-a"/);
    expect(verifyFencingToken(fresh, retired).ok).toBe(true);
  });

  it("signs with the first key unless an active id is given", () => {
    expect(makeKeyring([keyA, keyB]).active.id).toBe("key-a");
    expect(makeKeyring([keyA, keyB], "key_b").active.id).toBe("key_b");
    expect(makeKeyring([keyA, keyB]).byId.size).toBe(2);
  });

  it("refuses bad keyrings", () => {
    expect(() => makeKeyring([])).toThrow(/at least one/);
    expect(() => makeKeyring([{ id: "short", secret: Buffer.from("too short") }])).toThrow(/16 bytes/);
    expect(() => makeKeyring([{ id: "bad id", secret: randomBytes(32) }])).toThrow(/key id/);
    expect(() => makeKeyring([{ id: "a.b", secret: randomBytes(32) }])).toThrow(/key id/);
    expect(() => makeKeyring([keyA], "missing")).toThrow(/"missing"/);
  });
});

describe("malformed input never throws", () => {
  it("returns a failure for junk strings", () => {
    const junk = [
      "",
      " ",
      ".",
      "...",
      "....",
      "fg1",
      "fg1.key-a",
      "fg1.key-a.e30",
      "fg1.key-a.e30.",
      "fg1..e30.AAAA",
      "fg1.key-a..AAAA",
      "fg1.key-a.!!!.AAAA",
      "fg1.key-a.e30.!!!",
      "fg1.bad id.e30.AAAA",
      "fg2.key-a.e30.AAAA",
      "FG1.key-a.e30.AAAA",
      "x".repeat(5000),
      `fg1.key-a.${"A".repeat(5000)}.AAAA`,
      "\u0000\u0001\u0002",
      "😀.😀.😀.😀",
      "fg1.__proto__.e30.AAAA",
      "fg1.constructor.e30.AAAA",
      "fg1.toString.e30.AAAA",
    ];
    for (const j of junk) expectInvalid(j);
  });

  it("returns a failure for validly MAC'ed but malformed claims", () => {
    const bad = [
      "not json",
      "null",
      "42",
      '"string"',
      "[]",
      "{}",
      '{"l":"x","t":1,"b":"b"}', // neither key nor prefix
      '{"l":"x","t":1,"b":"b","k":"k","p":"p"}', // both
      '{"l":"x","t":0,"b":"b","k":"k"}',
      '{"l":"x","t":-1,"b":"b","k":"k"}',
      '{"l":"x","t":1.5,"b":"b","k":"k"}',
      '{"l":"x","t":"1","b":"b","k":"k"}',
      '{"l":"x","t":9007199254740993,"b":"b","k":"k"}',
      '{"l":1,"t":1,"b":"b","k":"k"}',
      '{"l":"x","t":1,"b":null,"k":"k"}',
      '{"l":"x","t":1,"b":"b","k":5}',
      '{"l":"x","t":1,"b":"b","p":{}}',
      '{"__proto__":{"l":"x","t":1,"b":"b","k":"k"}}',
    ];
    for (const json of bad) expectInvalid(signRaw(json), ring, /claims/);
    // The helper itself produces valid tokens for valid claims.
    expect(verifyFencingToken(signRaw('{"l":"x","t":1,"b":"b","k":"k"}'), ring)).toEqual({
      ok: true,
      claims: { leaseId: "x", token: 1, bucket: "b", key: "k" },
    });
  });

  it("does not throw for non-string-like values passed by a careless caller", () => {
    for (const v of [undefined, null, 5, {}, []]) {
      expect(() => verifyFencingToken(v as unknown as string, ring)).not.toThrow();
      expect(verifyFencingToken(v as unknown as string, ring).ok).toBe(false);
    }
  });
});
