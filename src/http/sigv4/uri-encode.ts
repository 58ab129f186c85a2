const UNRESERVED = /[A-Za-z0-9\-._~]/;

/**
 * AWS's UriEncode: every byte except the unreserved set becomes %XX (upper-case hex), so the
 * result differs from encodeURIComponent for !'()* and is the form SigV4 signs.
 */
function awsUriEncode(value: string): string {
  let out = "";
  for (const ch of value) {
    if (UNRESERVED.test(ch)) {
      out += ch;
      continue;
    }
    for (const byte of Buffer.from(ch, "utf8")) {
      out += `%${byte.toString(16).toUpperCase().padStart(2, "0")}`;
    }
  }
  return out;
}

/**
 * Decodes then re-encodes one path segment or query component, so that different but
 * equivalent client encodings (e.g. "(" vs "%28", "%7e" vs "~") meet in one canonical form.
 * A component that does not decode (bad escape, invalid UTF-8) is kept exactly as received.
 */
export function reencodeComponent(raw: string, plusIsSpace = false): string {
  try {
    return awsUriEncode(decodeURIComponent(plusIsSpace ? raw.replaceAll("+", " ") : raw));
  } catch {
    return raw;
  }
}
