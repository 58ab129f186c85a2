import { startHttpFaultProxy } from "./fault-proxy.js";
import { memorySampler } from "./memory.js";

/**
 * An HTTP fault proxy in a process of its own, so that a test can measure the proxy's memory
 * alone (fault-proxy.test.ts): started with fork() and the store's URL as its argument, it sends
 * `{ url }` once it listens; "start" begins sampling its memory, "stop" answers with the growth
 * since "start" (test/support/memory.ts), "close" ends it.
 */
const proxy = await startHttpFaultProxy(process.argv[2]!);
let sampler: ReturnType<typeof memorySampler> | null = null;
process.on("message", async (message) => {
  if (message === "start") {
    sampler = memorySampler();
    process.send!("started");
  } else if (message === "stop") {
    process.send!({ growth: sampler!.stop() });
  } else if (message === "close") {
    await proxy.close();
    process.disconnect();
  }
});
process.send!({ url: proxy.url });
