import { describe, expect, it } from "vitest";
import { storeIdentity } from "../../src/backends/routing/store-identity.js";
import { ConfigError, loadConfig } from "../../src/config/load.js";

/**
 * One stored object, one gateway name: a configuration under which two configured gateway
 * buckets reach the same stored objects is refused at start, with both names and the place.
 */

function load(overrides: Record<string, unknown>) {
  return loadConfig({ FENCEGATE_DATA_DIR: "/tmp/fencegate-routes" }, overrides);
}

function refusal(overrides: Record<string, unknown>): string {
  let thrown: unknown;
  try {
    load(overrides);
  } catch (e) {
    thrown = e;
  }
  expect(thrown).toBeInstanceOf(ConfigError);
  return (thrown as ConfigError).message;
}

const LAKE = { type: "s3", endpoint: "http://127.0.0.1:9000", forcePathStyle: true };

describe("two gateway buckets on one backend and target", () => {
  it.each([
    ["reports/", "", `the keys under "reports/" of "lake-data"`],
    ["", "reports/", `the keys under "reports/" of "lake-data"`],
    ["", "", `every key of "lake-data"`],
    ["a/", "a/b/", `the keys under "a/b/" of "lake-data"`],
    ["x/", "x/", `the keys under "x/" of "lake-data"`],
    ["a", "ab/", `the keys under "ab/" of "lake-data"`],
  ])("with prefixes %j and %j are refused", (first, second, keys) => {
    const message = refusal({
      backends: { lake: LAKE },
      buckets: {
        one: { backend: "lake", target: "lake-data", prefix: first },
        two: { backend: "lake", target: "lake-data", prefix: second },
      },
    });
    expect(message).toContain(
      `buckets.two: gateway buckets "one" and "two" reach the same stored objects: ${keys} in the S3 store at http://127.0.0.1:9000 (backend "lake")`,
    );
  });

  it("a target left out is the gateway bucket's own name", () => {
    const message = refusal({
      buckets: { data: {}, copy: { target: "data", prefix: "old/" } },
    });
    expect(message).toContain(
      `gateway buckets "data" and "copy" reach the same stored objects: the keys under "old/" of "data" in the filesystem under /tmp/fencegate-routes (backend "default")`,
    );
  });

  it("prefixes that do not start with one another, other targets and other stores are accepted", () => {
    const c = load({
      backends: { lake: LAKE, other: { ...LAKE, endpoint: "http://127.0.0.1:9001" } },
      buckets: {
        reports: { backend: "lake", target: "lake-data", prefix: "reports/" },
        events: { backend: "lake", target: "lake-data", prefix: "events/" },
        a: { backend: "lake", target: "lake-data", prefix: "a/" },
        ab: { backend: "lake", target: "lake-data", prefix: "ab/" },
        elsewhere: { backend: "lake", target: "other-data" },
        mirror: { backend: "other", target: "lake-data" },
        local: { target: "lake-data" },
      },
    });
    expect(Object.keys(c.buckets)).toHaveLength(7);
  });
});

describe("two named backends that are one store", () => {
  const cases: [string, Record<string, unknown>, Record<string, unknown>, string][] = [
    [
      "one S3 endpoint written two ways",
      { type: "s3", endpoint: "http://127.0.0.1:9000" },
      { type: "s3", endpoint: "HTTP://LocalHost:9000/" },
      "the S3 store at http://127.0.0.1:9000",
    ],
    [
      "Amazon S3 without an endpoint and through a regional endpoint",
      { type: "s3", region: "eu-west-1" },
      { type: "s3", endpoint: "https://s3.us-east-1.amazonaws.com" },
      "Amazon S3",
    ],
    [
      "an Azure account by connection string and by account URL",
      {
        type: "azure",
        connectionString:
          "DefaultEndpointsProtocol=https;AccountName=acct;AccountKey=a2V5;EndpointSuffix=core.windows.net",
      },
      { type: "azure", accountUrl: "https://acct.blob.core.windows.net/", sasToken: "sv=x" },
      "the Azure storage account at https://acct.blob.core.windows.net",
    ],
    [
      "Azurite as development storage and by its blob endpoint",
      { type: "azure", connectionString: "UseDevelopmentStorage=true" },
      {
        type: "azure",
        connectionString:
          "DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;AccountKey=a2V5;BlobEndpoint=http://localhost:10000/devstoreaccount1;",
      },
      "the Azure storage account at http://127.0.0.1:10000/devstoreaccount1",
    ],
  ];

  it.each(cases)("%s: routes into one target are refused", (_, first, second, label) => {
    const message = refusal({
      backends: { first, second },
      buckets: {
        alpha: { backend: "first", target: "shared" },
        beta: { backend: "second", target: "shared", prefix: "beta/" },
      },
    });
    expect(message).toContain(
      `buckets.beta: gateway buckets "alpha" and "beta" reach the same stored objects: the keys under "beta/" of "shared" in ${label} (backends "first" and "second", which are one store)`,
    );
  });

  it("the default backend and a named backend that is the same store", () => {
    const message = refusal({
      backend: LAKE,
      backends: { lake: { ...LAKE, endpoint: "http://localhost:9000/" } },
      buckets: {
        direct: { target: "lake-data", prefix: "" },
        named: { backend: "lake", target: "lake-data", prefix: "named/" },
      },
    });
    expect(message).toContain(
      `gateway buckets "direct" and "named" reach the same stored objects: the keys under "named/" of "lake-data" in the S3 store at http://127.0.0.1:9000 (backends "default" and "lake", which are one store)`,
    );
  });

  it("different stores are told apart", () => {
    const dataDir = { dataDir: "/tmp/x" };
    const key = (spec: Parameters<typeof storeIdentity>[0]) => storeIdentity(spec, dataDir).key;
    expect(key({ type: "s3", endpoint: "http://127.0.0.1:9000" })).not.toBe(
      key({ type: "s3", endpoint: "http://127.0.0.1:9001" }),
    );
    expect(key({ type: "s3", endpoint: "http://store-a:9000" })).not.toBe(
      key({ type: "s3", endpoint: "http://store-b:9000" }),
    );
    // Amazon S3's partitions each have their own bucket names.
    expect(key({ type: "s3", region: "cn-north-1" })).not.toBe(key({ type: "s3", region: "eu-west-1" }));
    expect(key({ type: "s3", endpoint: "https://s3.cn-north-1.amazonaws.com.cn" })).toBe(
      key({ type: "s3", region: "cn-north-1" }),
    );
    expect(key({ type: "azure", accountUrl: "https://one.blob.core.windows.net" })).not.toBe(
      key({ type: "azure", accountUrl: "https://two.blob.core.windows.net" }),
    );
    expect(key({ type: "azure", accountUrl: "https://one.dfs.core.windows.net" })).toBe(
      key({ type: "azure", accountUrl: "https://one.blob.core.windows.net" }),
    );
    expect(key({ type: "s3", endpoint: "http://127.0.0.1:10000" })).not.toBe(
      key({ type: "azure", accountUrl: "http://127.0.0.1:10000" }),
    );
    expect(key({ type: "fs" })).toBe(key({ type: "fs", root: "/tmp/x/" }));
  });
});

describe("a route into a store bucket that the fallback serves under its own name", () => {
  it("is accepted at start: the fallback refuses that name at request time", () => {
    const c = load({ buckets: { reports: { target: "shared", prefix: "reports/" } } });
    expect(c.buckets.reports).toEqual({ backend: "default", target: "shared", prefix: "reports/" });
  });
});

describe("the shipped example of several backends", () => {
  it("has no two gateway buckets on one stored location", () => {
    const c = loadConfig({ FENCEGATE_CONFIG: "config/several-backends.yaml" });
    expect(Object.keys(c.buckets).sort()).toEqual(["cold", "events", "reports"]);
  });
});
