import { describe, expect, it } from "vitest";
import { decodeMetadataValue, encodeMetadataValue } from "../../src/s3/protocol/metadata-encoding.js";

const asReceived = (text: string) => Buffer.from(text, "utf8").toString("latin1");

describe("user metadata encoding", () => {
  it("reads UTF-8 header bytes as text and keeps ASCII as it is", () => {
    expect(decodeMetadataValue(asReceived("Zürich"))).toBe("Zürich");
    expect(decodeMetadataValue(asReceived("日本語"))).toBe("日本語");
    expect(decodeMetadataValue("plain ascii")).toBe("plain ascii");
  });

  it("keeps bytes that are not UTF-8 as latin1 text", () => {
    expect(decodeMetadataValue("Hello World\u00e9")).toBe("Hello World\u00e9");
  });

  it("decodes RFC 2047 encoded-words (B and Q)", () => {
    expect(decodeMetadataValue("=?UTF-8?B?WsO8cmljaA==?=")).toBe("Zürich");
    expect(decodeMetadataValue("=?utf-8?Q?Z=C3=BCrich_city?=")).toBe("Zürich city");
    expect(decodeMetadataValue("=?UTF-8?B?not base64!?=")).toBe("=?UTF-8?B?not base64!?=");
  });

  it("returns non-ASCII values as encoded-words and round-trips them", () => {
    expect(encodeMetadataValue("ascii only")).toBe("ascii only");
    const encoded = encodeMetadataValue("ça va");
    expect(encoded).toMatch(/^=\?UTF-8\?B\?[A-Za-z0-9+/=]+\?=$/);
    expect(decodeMetadataValue(encoded)).toBe("ça va");
    expect(encodeMetadataValue("line\nbreak")).toMatch(/^=\?UTF-8\?B\?/);
  });
});
