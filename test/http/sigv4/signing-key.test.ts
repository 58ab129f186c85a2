import { describe, expect, it } from "vitest";
import { deriveSigningKey } from "../../../src/http/sigv4/signing-key.js";

/**
 * The SigV4 signing key is four HMACs away from the secret and changes only with the secret,
 * the date, the region and the service: it is derived once per combination and then reused.
 */
describe("SigV4 signing key", () => {
  it("matches AWS's published example", () => {
    // https://docs.aws.amazon.com/general/latest/gr/signature-v4-examples.html
    const key = deriveSigningKey("wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", "20120215", "us-east-1", "iam");
    expect(key.toString("hex")).toBe("f4780e2d9f65fa895f9c67b32ce1baf0b0d8a43505a000a1a9e090d414db404d");
  });

  it("is derived once per secret, date, region and service, then reused", () => {
    const first = deriveSigningKey("secret-a", "20261124", "us-east-1", "s3");
    // The same Buffer, not an equal one: nothing was derived again.
    expect(deriveSigningKey("secret-a", "20261124", "us-east-1", "s3")).toBe(first);
    const others = [
      deriveSigningKey("secret-b", "20261124", "us-east-1", "s3"),
      deriveSigningKey("secret-a", "20261125", "us-east-1", "s3"),
      deriveSigningKey("secret-a", "20261124", "eu-west-1", "s3"),
      deriveSigningKey("secret-a", "20261124", "us-east-1", "iam"),
    ];
    for (const other of others) expect(other.equals(first)).toBe(false);
    expect(deriveSigningKey("secret-a", "20261124", "us-east-1", "s3")).toBe(first);
  });

  it("keeps a bounded number of keys, dropping the oldest first", () => {
    const oldest = deriveSigningKey("bounded", "20200101", "r-0", "s3");
    for (let i = 1; i <= 600; i++) deriveSigningKey("bounded", "20200101", `r-${i}`, "s3");
    const recent = deriveSigningKey("bounded", "20200101", "r-600", "s3");
    expect(deriveSigningKey("bounded", "20200101", "r-600", "s3")).toBe(recent);
    const again = deriveSigningKey("bounded", "20200101", "r-0", "s3");
    expect(again.equals(oldest)).toBe(true);
    expect(again).not.toBe(oldest);
  });
});
