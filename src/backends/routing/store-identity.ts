import { resolve } from "node:path";

/**
 * Which store a configured backend is, so that two backends that are one store are known as such:
 * a stored object (store, bucket or container, key) must be reachable under one gateway name
 * only, or leases on the two names would not exclude each other.
 *
 * A store is told by its type and by where it is: the filesystem root; the S3 endpoint (Amazon
 * S3's own endpoints, with or without a region, are one store per partition); the Azure account's
 * blob endpoint, from a connection string or an account URL. Names are compared after
 * normalizing case, default ports, trailing slashes and the loopback names (localhost, 127.0.0.1,
 * ::1). What cannot be told from the configuration: one server under two DNS names or addresses,
 * a proxy, load balancer or second gateway in front of a store, Amazon S3 access points, Azure
 * custom domains and private endpoints, and stores that replicate into each other.
 */
export type StoreIdentity = {
  /** Equal for two backends that are one store. */
  key: string;
  /** The store for people: "the S3 store at http://…", "Amazon S3", … */
  label: string;
};

/** What the configuration says about a backend, as far as telling stores apart needs. */
type StoreSpec =
  | { type: "fs"; root?: string | undefined }
  | { type: "s3"; endpoint?: string | undefined; region?: string | undefined }
  | {
      type: "azure";
      connectionString?: string | undefined;
      accountUrl?: string | undefined;
    };

/** The store a backend spec names; `dataDir` is the filesystem backend's root when it has none. */
export function storeIdentity(spec: StoreSpec, opts: { dataDir: string }): StoreIdentity {
  switch (spec.type) {
    case "fs": {
      const root = resolve(spec.root ?? opts.dataDir);
      return { key: `fs:${root}`, label: `the filesystem under ${root}` };
    }
    case "s3":
      return s3Identity(spec.endpoint, spec.region);
    case "azure": {
      const url =
        spec.connectionString !== undefined ? blobEndpointOf(spec.connectionString) : spec.accountUrl;
      // A connection string that names no account: like no other (the backend refuses it anyway).
      if (url === undefined)
        return { key: `azure:unparsed:${spec.connectionString}`, label: "an Azure account" };
      const place = placeOf(url, { azure: true });
      return { key: `azure:${place}`, label: `the Azure storage account at ${url}` };
    }
  }
}

/** The partitions of Amazon S3: a bucket name is unique within one. */
function amazonPartition(region: string | undefined, host = ""): string {
  if (host.endsWith(".amazonaws.com.cn") || region?.startsWith("cn-")) return "aws-cn";
  if (host.includes("us-gov-") || region?.startsWith("us-gov-")) return "aws-us-gov";
  return "aws";
}

const AMAZON_S3_HOST = /^s3([.-][a-z0-9-]+)*\.amazonaws\.com(\.cn)?$/;

function s3Identity(endpoint: string | undefined, region: string | undefined): StoreIdentity {
  if (endpoint === undefined || endpoint.trim() === "") {
    const partition = amazonPartition(region);
    return { key: `s3:amazon:${partition}`, label: labelOfAmazon(partition) };
  }
  const host = hostOf(endpoint);
  if (host !== null && AMAZON_S3_HOST.test(host)) {
    const partition = amazonPartition(region, host);
    return { key: `s3:amazon:${partition}`, label: labelOfAmazon(partition) };
  }
  return { key: `s3:${placeOf(endpoint, { azure: false })}`, label: `the S3 store at ${endpoint}` };
}

const labelOfAmazon = (partition: string) =>
  partition === "aws" ? "Amazon S3" : `Amazon S3 (partition ${partition})`;

function hostOf(url: string): string | null {
  try {
    return new URL(url).hostname.toLowerCase();
  } catch {
    return null;
  }
}

const LOOPBACK = new Set(["localhost", "127.0.0.1", "[::1]", "::1"]);

/** host:port/path of an endpoint, normalized; the text itself when it is not a URL. */
function placeOf(url: string, opts: { azure: boolean }): string {
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    return url.trim().toLowerCase();
  }
  let host = parsed.hostname.toLowerCase();
  if (LOOPBACK.has(host)) host = "loopback";
  // An Azure account's DFS endpoint and its read-only secondary are the same account.
  if (opts.azure) host = host.replace(/^([a-z0-9]+)(-secondary)?\.(blob|dfs)\./, "$1.blob.");
  const port = parsed.port || (parsed.protocol === "http:" ? "80" : "443");
  const path = parsed.pathname.replace(/\/+$/, "").toLowerCase();
  return `${host}:${port}${path}`;
}

/** The blob endpoint an Azure connection string names. */
function blobEndpointOf(connectionString: string): string | undefined {
  const fields = new Map<string, string>();
  for (const part of connectionString.split(";")) {
    const at = part.indexOf("=");
    if (at > 0) fields.set(part.slice(0, at).trim().toLowerCase(), part.slice(at + 1).trim());
  }
  if (fields.get("usedevelopmentstorage")?.toLowerCase() === "true") {
    return "http://127.0.0.1:10000/devstoreaccount1";
  }
  const explicit = fields.get("blobendpoint");
  if (explicit) return explicit;
  const account = fields.get("accountname");
  if (!account) return undefined;
  const protocol = fields.get("defaultendpointsprotocol") ?? "https";
  return `${protocol}://${account}.blob.${fields.get("endpointsuffix") ?? "core.windows.net"}`;
}
