import { setFlagsFromString } from "node:v8";
import { runInNewContext } from "node:vm";

export const MIB = 1024 * 1024;

export type MemoryGrowth = {
  /** Peak resident set size over the start, in bytes. */
  rss: number;
  /**
   * Peak retained memory over the start: JavaScript heap in use plus ArrayBuffers (where Buffers
   * live), each sample taken right after a full garbage collection, so it counts what something
   * still holds and not garbage the collector has not come to yet.
   */
  retained: number;
};

/** The garbage collector, callable without starting Node with --expose-gc. */
function collector(): () => void {
  if (typeof globalThis.gc === "function") return globalThis.gc;
  setFlagsFromString("--expose-gc");
  return runInNewContext("gc") as () => void;
}

/**
 * Peak memory growth of this process from now until stop(): RSS sampled every 10 ms, retained
 * memory every 100 ms. A body held whole shows in both. Without collections RSS also holds
 * garbage the collector has not come to yet, and how much depends on the Node version: on Node
 * 24 the same 100 MiB stream grew RSS and uncollected heap by 20 to 40 MiB more than on Node 20
 * or 22. The collections every 100 ms keep that garbage from piling up, so the RSS figure here is
 * what the transfer holds plus what the allocator keeps after it was freed.
 */
export function memorySampler(): { stop(): MemoryGrowth } {
  const gc = collector();
  const retainedNow = () => {
    gc();
    const m = process.memoryUsage();
    return m.heapUsed + m.arrayBuffers;
  };
  const startRetained = retainedNow();
  const startRss = process.memoryUsage().rss;
  let peakRss = startRss;
  let peakRetained = startRetained;
  const sampleRss = () => {
    peakRss = Math.max(peakRss, process.memoryUsage().rss);
  };
  const sampleRetained = () => {
    peakRetained = Math.max(peakRetained, retainedNow());
  };
  const rssTimer = setInterval(sampleRss, 10);
  const retainedTimer = setInterval(sampleRetained, 100);
  return {
    stop() {
      clearInterval(rssTimer);
      clearInterval(retainedTimer);
      sampleRss();
      return { rss: peakRss - startRss, retained: peakRetained - startRetained };
    },
  };
}

export const inMiB = (bytes: number): string => (bytes / MIB).toFixed(1);
