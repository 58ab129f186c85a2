import { Readable } from "node:stream";
import { describe, expect, it } from "vitest";
import { memoryBody, memoryBytes } from "../../src/core/memory-body.js";

describe("memoryBody", () => {
  it("reads as its bytes, in one chunk", async () => {
    const chunks: Buffer[] = [];
    for await (const chunk of memoryBody(Buffer.from("inline bytes"))) chunks.push(chunk as Buffer);
    expect(chunks.map(String)).toEqual(["inline bytes"]);
  });

  it("hands its bytes over only while nothing was read from it, and never for another stream", async () => {
    const data = Buffer.from("abc");
    expect(memoryBytes(memoryBody(data))).toBe(data);
    const started = memoryBody(data);
    for await (const _ of started) break;
    expect(memoryBytes(started)).toBeUndefined();
    expect(memoryBytes(Readable.from([data]))).toBeUndefined();
  });
});
