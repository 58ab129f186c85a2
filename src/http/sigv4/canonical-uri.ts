import { reencodeComponent } from "./uri-encode.js";

/**
 * Canonical URI candidates for S3 (which neither normalizes "." / ".." / "//" nor double
 * encodes). First the path with each segment decoded and re-encoded by AWS rules — what every
 * SDK signs for S3 — then, if different, the path exactly as received, for clients that sign
 * their own (looser) encoding of the path.
 */
export function canonicalUriCandidates(rawPath: string): string[] {
  const received = rawPath === "" ? "/" : rawPath;
  const normalized = received
    .split("/")
    .map((segment) => reencodeComponent(segment))
    .join("/");
  return normalized === received ? [normalized] : [normalized, received];
}
