import { describe, expect, it } from "vitest";
import { S3Context } from "../../../src/backends/s3/context.js";
import { Layout } from "../../../src/backends/s3/layout.js";
import type { Store } from "../../../src/backends/s3/store.js";

/**
 * Replaced blobs are removed a moment later, in batches (S3Context.removeReplaced). A caller that
 * asks for them to be removed now (close, the collector, a test's quiescence) must not return
 * while a removal that started before it, from the timer, is still under way.
 */
describe("flushReplaced", () => {
  it("resolves only once a removal already under way has finished", async () => {
    const removed: string[] = [];
    let releaseFirst: () => void = () => undefined;
    const firstHeld = new Promise<void>((resolve) => {
      releaseFirst = resolve;
    });
    let calls = 0;
    const store = {
      async deleteMany(_bucket: string, names: string[]) {
        calls++;
        if (calls === 1) await firstHeld;
        removed.push(...names);
      },
    } as unknown as Store;
    const layout = new Layout(".fencegate/");
    const ctx = new S3Context(
      store,
      layout,
      undefined as never,
      undefined as never,
      () => Date.now(),
      undefined,
      undefined,
    );
    ctx.removeReplaced("b", "t1");
    // The timer's removal starts (held in the store); then someone asks for a flush.
    const timers = ctx.flushReplaced();
    let done = false;
    const flushed = ctx.flushReplaced().then(() => {
      done = true;
    });
    await new Promise((r) => setTimeout(r, 50));
    expect(done, "the second flush returned while the first removal was under way").toBe(false);
    releaseFirst();
    await Promise.all([timers, flushed]);
    expect(removed).toEqual([layout.blobName("t1")]);
  });
});
