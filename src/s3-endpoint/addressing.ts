import { DomainError } from "../core/errors.js";

type Addressed = { bucket: string | null; key: string | null; virtualHost: boolean };

/**
 * Which bucket and key a request names: path-style (`/bucket/key`) or, when a domain is
 * configured, virtual-hosted style (`bucket.domain`, the whole path being the key).
 * The key is decoded once; the signature is checked against the path as received.
 */
export function addressRequest(rawPath: string, hostHeader: string | undefined, domain?: string): Addressed {
  const hostBucket = domain ? bucketFromHost(hostHeader, domain) : null;
  const path = rawPath.startsWith("/") ? rawPath.slice(1) : rawPath;
  if (hostBucket !== null) {
    return { bucket: hostBucket, key: path === "" ? null : decode(path), virtualHost: true };
  }
  if (path === "") return { bucket: null, key: null, virtualHost: false };
  const slash = path.indexOf("/");
  if (slash === -1) return { bucket: decode(path), key: null, virtualHost: false };
  const key = path.slice(slash + 1);
  return { bucket: decode(path.slice(0, slash)), key: key === "" ? null : decode(key), virtualHost: false };
}

/** The bucket a virtual-hosted request names in its Host header (`bucket.domain`), if any. */
export function bucketFromHost(hostHeader: string | undefined, domain: string): string | null {
  if (!hostHeader) return null;
  const host = hostHeader.replace(/:\d+$/, "").toLowerCase();
  const suffix = `.${domain.toLowerCase()}`;
  if (!host.endsWith(suffix)) return null;
  const bucket = host.slice(0, -suffix.length);
  return bucket === "" ? null : bucket;
}

function decode(s: string): string {
  try {
    return decodeURIComponent(s);
  } catch {
    throw new DomainError("InvalidURI", "Couldn't parse the specified URI.");
  }
}
