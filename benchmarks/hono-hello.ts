/**
 * The floor of an HTTP request on this machine: a Hono hello-world on @hono/node-server, the
 * same stack fencegate answers with. Run as a child process by the lease benchmark.
 */
import type { AddressInfo } from "node:net";
import { serve } from "@hono/node-server";
import { Hono } from "hono";

const app = new Hono();
app.all("*", (c) => c.text("Hello, World!"));
const server = serve({ fetch: app.fetch, port: 0, hostname: "127.0.0.1" }, () => {
  const { port } = server.address() as AddressInfo;
  process.stdout.write(`hono hello-world listening on http://127.0.0.1:${port}\n`);
});
