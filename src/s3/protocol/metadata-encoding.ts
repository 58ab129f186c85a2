/**
 * Non-ASCII user metadata, as S3 handles it: values arrive as raw header bytes (UTF-8 from most
 * clients, sometimes an RFC 2047 encoded-word), are stored as text, and are returned
 * RFC 2047-encoded (`=?UTF-8?B?…?=`) so that every response header stays ASCII.
 */

const utf8 = new TextDecoder("utf-8", { fatal: true });

/** A received header value (a latin1 string: one character per byte) as the text it carries. */
export function decodeMetadataValue(raw: string): string {
  const word = /^=\?([^?]+)\?([BbQq])\?([^?]*)\?=$/.exec(raw.trim());
  if (word) {
    const decoded = decodeEncodedWord(word[1]!, word[2]!, word[3]!);
    if (decoded !== null) return decoded;
  }
  if (/^[\x00-\x7f]*$/.test(raw)) return raw;
  try {
    return utf8.decode(Buffer.from(raw, "latin1"));
  } catch {
    return raw; // not UTF-8: the bytes were latin1 text
  }
}

/** A stored value as a response header: ASCII as it is, anything else as an encoded-word. */
export function encodeMetadataValue(value: string): string {
  if (/^[\x20-\x7e\t]*$/.test(value)) return value;
  return `=?UTF-8?B?${Buffer.from(value, "utf8").toString("base64")}?=`;
}

function decodeEncodedWord(charset: string, encoding: string, text: string): string | null {
  const cs = charset.toLowerCase();
  if (cs !== "utf-8" && cs !== "utf8" && cs !== "iso-8859-1" && cs !== "us-ascii") return null;
  let bytes: Buffer;
  if (encoding.toUpperCase() === "B") {
    if (!/^[A-Za-z0-9+/]*={0,2}$/.test(text)) return null;
    bytes = Buffer.from(text, "base64");
  } else {
    const q = text
      .replace(/_/g, " ")
      .replace(/=([0-9A-Fa-f]{2})/g, (_, hex: string) => String.fromCharCode(Number.parseInt(hex, 16)));
    bytes = Buffer.from(q, "latin1");
  }
  if (cs === "iso-8859-1") return bytes.toString("latin1");
  try {
    return utf8.decode(bytes);
  } catch {
    return null;
  }
}
