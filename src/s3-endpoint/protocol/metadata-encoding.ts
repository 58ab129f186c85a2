/**
 * User metadata values, as S3 handles them: a value is kept as the bytes received and returned
 * byte for byte. Node hands over header values as latin1 strings (one character per byte), so
 * the stored value is that string: raw UTF-8 or latin-1 bytes (what boto3 sends for a str with
 * é), an RFC 2047 encoded-word (`=?UTF-8?B?…?=`, returned as sent, for the client to decode),
 * plain ASCII alike.
 *
 * Versions before this one stored non-ASCII values decoded to text; such a value with characters
 * beyond latin1 cannot be sent as header bytes and goes out as an encoded-word, as it did then.
 */

/** A received header value (a latin1 string: one character per byte) as it is stored. */
export function decodeMetadataValue(raw: string): string {
  return raw;
}

/**
 * Characters a response header can carry as bytes: tab, visible ASCII, space and the bytes
 * 0x80-0xFF (latin1 characters, written back as the bytes they were read from).
 */
const HEADER_BYTES = /^[\t\x20-\x7e\x80-\xff]*$/;

/** A stored value as a response header: its bytes as received, or an encoded-word otherwise. */
export function encodeMetadataValue(value: string): string {
  if (HEADER_BYTES.test(value)) return value;
  return `=?UTF-8?B?${Buffer.from(value, "utf8").toString("base64")}?=`;
}

/** The size of a stored value in bytes (S3's 2 KiB user metadata limit counts bytes). */
export function metadataValueBytes(value: string): number {
  return /^[\x00-\xff]*$/.test(value) ? value.length : Buffer.byteLength(value, "utf8");
}
