/**
 * Which request targets the lease API answers (isLeaseApiTarget): its first path segment is
 * `_fence` however it is written, and nothing else is, on any host but a virtual-hosted bucket's.
 */
import { describe, expect, it } from "vitest";
import { isLeaseApiTarget } from "../../src/server/gateway.js";

describe("isLeaseApiTarget", () => {
  it("takes the lease API's paths as clients send them", () => {
    for (const target of [
      "/_fence/v1/leases",
      "/_fence/v1/leases/abc",
      "/_fence",
      "/_fence?x=1",
      "/_fence/",
    ]) {
      expect(isLeaseApiTarget(target, "127.0.0.1:9700", undefined), target).toBe(true);
    }
  });

  it("takes the first segment however it is encoded or preceded by empty segments", () => {
    for (const target of ["//_fence/v1/leases", "/%5Ffence/v1/leases", "/_fence%2Fv1/leases", "/%5ffence"]) {
      expect(isLeaseApiTarget(target, "127.0.0.1:9700", undefined), target).toBe(true);
    }
  });

  it("leaves every other first segment to S3", () => {
    for (const target of [
      "/_fencex/v1/leases",
      "/_fenc",
      "/bucket/_fence/v1",
      "/",
      "/_fence-x",
      "/_fence.v1",
    ]) {
      expect(isLeaseApiTarget(target, "127.0.0.1:9700", undefined), target).toBe(false);
    }
    expect(isLeaseApiTarget(undefined, "127.0.0.1:9700", undefined)).toBe(false);
  });

  it("leaves a virtual-hosted bucket's paths to S3, the lease API's included", () => {
    expect(isLeaseApiTarget("/_fence/v1/leases", "photos.s3.example.com", "s3.example.com")).toBe(false);
    expect(isLeaseApiTarget("/_fence/v1/leases", "s3.example.com", "s3.example.com")).toBe(true);
  });
});
