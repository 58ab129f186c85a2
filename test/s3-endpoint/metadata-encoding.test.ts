import { describe, expect, it } from "vitest";
import {
  decodeMetadataValue,
  encodeMetadataValue,
  metadataValueBytes,
} from "../../src/s3-endpoint/protocol/metadata-encoding.js";

const asReceived = (text: string) => Buffer.from(text, "utf8").toString("latin1");

describe("user metadata encoding", () => {
  it("keeps the header bytes as received: UTF-8, latin-1 and ASCII alike", () => {
    expect(decodeMetadataValue(asReceived("Zürich"))).toBe(asReceived("Zürich"));
    expect(decodeMetadataValue(asReceived("日本語"))).toBe(asReceived("日本語"));
    expect(decodeMetadataValue("Hello World\u00e9")).toBe("Hello World\u00e9");
    expect(decodeMetadataValue("plain ascii")).toBe("plain ascii");
  });

  it("keeps RFC 2047 encoded-words as sent (the client decodes what it encoded)", () => {
    expect(decodeMetadataValue("=?UTF-8?B?WsO8cmljaA==?=")).toBe("=?UTF-8?B?WsO8cmljaA==?=");
    expect(encodeMetadataValue("=?utf-8?Q?Z=C3=BCrich_city?=")).toBe("=?utf-8?Q?Z=C3=BCrich_city?=");
  });

  it("returns received bytes as they are", () => {
    expect(encodeMetadataValue("ascii only")).toBe("ascii only");
    expect(encodeMetadataValue(asReceived("ça va"))).toBe(asReceived("ça va"));
    expect(encodeMetadataValue("Hello World\u00e9")).toBe("Hello World\u00e9");
  });

  it("returns what cannot be header bytes (text stored by older versions, control characters) as an encoded-word", () => {
    const encoded = encodeMetadataValue("日本語");
    expect(encoded).toBe(`=?UTF-8?B?${Buffer.from("日本語").toString("base64")}?=`);
    expect(encodeMetadataValue("line\nbreak")).toMatch(/^=\?UTF-8\?B\?/);
  });

  it("counts a value's bytes as received", () => {
    expect(metadataValueBytes(asReceived("日本語"))).toBe(9);
    expect(metadataValueBytes("日本語")).toBe(9);
    expect(metadataValueBytes("Hello World\u00e9")).toBe(12);
  });
});
