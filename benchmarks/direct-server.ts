import { randomUUID } from "node:crypto";
import { createReadStream, createWriteStream, mkdirSync } from "node:fs";
import { open, rename, stat } from "node:fs/promises";
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { join } from "node:path";
import { pipeline } from "node:stream/promises";

/**
 * The baseline: an HTTP server that stores PUT bodies the way a careful server would without
 * fencing — stream to a temporary file, fsync, rename — and serves GETs from the file. No
 * authentication, no metadata database, no leases, no audit log.
 */
export async function startDirectServer(root: string): Promise<{ url: string; server: Server }> {
  mkdirSync(join(root, "tmp"), { recursive: true });
  const pathOf = (url: string) => join(root, Buffer.from(url.split("?")[0]!).toString("base64url"));
  const server = createServer(async (req, res) => {
    try {
      if (req.method === "PUT") {
        const tmp = join(root, "tmp", randomUUID());
        await pipeline(req, createWriteStream(tmp));
        const fh = await open(tmp, "r+");
        await fh.sync();
        await fh.close();
        await rename(tmp, pathOf(req.url!));
        res.writeHead(200, { etag: '"0"' }).end();
      } else if (req.method === "GET") {
        const path = pathOf(req.url!);
        const { size } = await stat(path);
        res.writeHead(200, { "content-length": size, "content-type": "binary/octet-stream" });
        await pipeline(createReadStream(path), res);
      } else {
        res.writeHead(200).end();
      }
    } catch {
      if (!res.headersSent) res.writeHead(500).end();
      else res.destroy();
    }
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, server };
}

// Run as a child process by the benchmarks: `tsx benchmarks/direct-server.ts <root>`.
if (process.argv[1] && import.meta.filename === process.argv[1]) {
  const root = process.argv[2];
  if (!root) throw new Error("usage: direct-server.ts <root>");
  const { url } = await startDirectServer(root);
  process.stdout.write(`direct server listening on ${url}\n`);
}
