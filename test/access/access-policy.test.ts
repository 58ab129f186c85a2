import { describe, expect, it } from "vitest";
import { createAccessPolicy, type PrincipalGrants } from "../../src/access/access-policy.js";
import { loadConfig } from "../../src/config/load.js";
import { resolveSecrets } from "../../src/config/resolve.js";
import { tempDir } from "../support/gateway.js";

describe("access policy", () => {
  const policy = createAccessPolicy(
    new Map<string, PrincipalGrants>([
      ["root", { admin: true, rules: [] }],
      ["legacy", { admin: false, rules: "all" }],
      [
        "writer",
        {
          admin: false,
          rules: [
            { bucket: "jobs", prefix: "team-a/", actions: ["read", "write", "lease"] },
            { bucket: "*", prefix: "", actions: ["read"] },
          ],
        },
      ],
      ["reader", { admin: false, rules: [{ bucket: "jobs", prefix: "", actions: ["read"] }] }],
    ]),
  );

  it("lets administrators and unrestricted keys do everything, and only administrators be administrators", () => {
    expect(policy.allows("root", "write", "any", { key: "k" })).toBe(true);
    expect(policy.allows("legacy", "lease", "any", { prefix: "" })).toBe(true);
    expect(policy.isAdmin("root")).toBe(true);
    expect(policy.isAdmin("legacy")).toBe(false);
    expect(policy.isAdmin("nobody")).toBe(false);
    expect(policy.allows("nobody", "read", "jobs", { key: "k" })).toBe(false);
  });

  it("limits a key to its prefixes and actions", () => {
    expect(policy.allows("writer", "write", "jobs", { key: "team-a/x" })).toBe(true);
    expect(policy.allows("writer", "write", "jobs", { key: "team-b/x" })).toBe(false);
    expect(policy.allows("writer", "lease", "jobs", { prefix: "team-a/sub/" })).toBe(true);
    expect(policy.allows("writer", "lease", "jobs", { prefix: "team" })).toBe(false);
    expect(policy.allows("writer", "read", "elsewhere", { key: "k" })).toBe(true); // the `*` rule
    expect(policy.allows("writer", "write", "jobs", { bucket: true })).toBe(false);
    expect(policy.allows("reader", "read", "jobs", { prefix: "" })).toBe(true);
    expect(policy.allows("reader", "read", "jobs", { bucket: true })).toBe(true);
    expect(policy.allows("reader", "write", "jobs", { key: "k" })).toBe(false);
    expect(policy.allows("reader", "lease", "jobs", { key: "k" })).toBe(false);
  });

  it("is built from the configuration: the root credential is an administrator, others as configured", () => {
    const dir = tempDir();
    try {
      const config = loadConfig(
        {
          FENCEGATE_DATA_DIR: dir.path,
          FENCEGATE_ACCESS_KEY_ID: "rootkey",
          FENCEGATE_SECRET_ACCESS_KEY: "root-secret-1",
        },
        {
          credentials: [
            { accessKeyId: "ops", secretAccessKey: "ops-secret-1", admin: true },
            {
              accessKeyId: "team-a",
              secretAccessKey: "team-a-secret",
              allow: [{ bucket: "jobs", prefix: "team-a/", actions: ["read", "write"] }],
            },
            { accessKeyId: "old", secretAccessKey: "old-secret-1" },
          ],
        },
      );
      const { access } = resolveSecrets(config);
      expect(access.isAdmin("rootkey")).toBe(true);
      expect(access.isAdmin("ops")).toBe(true);
      expect(access.isAdmin("team-a")).toBe(false);
      expect(access.allows("team-a", "write", "jobs", { key: "team-a/k" })).toBe(true);
      expect(access.allows("team-a", "lease", "jobs", { key: "team-a/k" })).toBe(false);
      expect(access.allows("old", "lease", "jobs", { key: "k" })).toBe(true);
      expect(access.isAdmin("old")).toBe(false);
      const dev = resolveSecrets(loadConfig({ FENCEGATE_DATA_DIR: dir.path }));
      expect(dev.access.isAdmin("fencegate")).toBe(true);
    } finally {
      dir.cleanup();
    }
  });
});
