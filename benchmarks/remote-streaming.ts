/**
 * One large object (1 GiB by default) streamed through fencegate to each remote backend and back
 * (a fenced PUT, then a GET), next to direct access to the same store in the same run, with the
 * gateway's peak RSS growth during each transfer. Alternating rounds, medians.
 *
 * - s3: the store is a second fencegate (fs backend, fencing optional) in its own process; the
 *   gateway under test runs the S3 backend against it. Direct: the same signed PUT and GET sent
 *   to the store itself.
 * - azure: the store is Azurite (on disk) in its own process; the gateway runs the Azure backend
 *   against it. Direct: the Azure SDK from this process (uploadStream in 8 MiB blocks, download).
 *
 *   npx tsx benchmarks/remote-streaming.ts [--rounds 2] [--mib 1024] [--backends s3,azure]
 */
import { type ChildProcess, spawn } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Readable, Writable } from "node:stream";
import { pipeline } from "node:stream/promises";
import { parseArgs } from "node:util";
import { BlobServiceClient } from "@azure/storage-blob";
import { Endpoint, objectPath } from "./lib/http-client.js";
import { alternate } from "./lib/load.js";
import { type Row, table } from "./lib/report.js";
import { FENCEGATE_CREDS, ROOT, rssOf, type Server, startFencegate } from "./lib/servers.js";

const MiB = 1024 * 1024;
const BUCKET = "bench";

export type RemoteStreamingOptions = { rounds: number; mib: number; backends: ("s3" | "azure")[] };

function bodyStream(mib: number): Readable {
  const chunk = Buffer.alloc(MiB, 0x62);
  return Readable.from(
    (function* chunks() {
      for (let i = 0; i < mib; i++) yield chunk;
    })(),
    { objectMode: false },
  );
}

/** Runs `work` while sampling a process's RSS every 20 ms; the peak growth over the start, in MiB. */
async function withPeakRss<T>(
  pid: number,
  work: () => Promise<T>,
): Promise<{ result: T; growthMiB: number }> {
  const idle = rssOf(pid);
  let peak = idle;
  const timer = setInterval(() => {
    peak = Math.max(peak, rssOf(pid));
  }, 20);
  try {
    const result = await work();
    peak = Math.max(peak, rssOf(pid));
    return { result, growthMiB: (peak - idle) / MiB };
  } finally {
    clearInterval(timer);
  }
}

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = createServer();
    srv.once("error", reject);
    srv.listen(0, "127.0.0.1", () => {
      const port = (srv.address() as { port: number }).port;
      srv.close(() => resolve(port));
    });
  });
}

const AZURITE_KEY =
  "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==";

async function startAzurite(dir: string): Promise<Server & { connectionString: string }> {
  const port = await freePort();
  const child: ChildProcess = spawn(
    process.execPath,
    [
      join(ROOT, "node_modules/azurite/dist/src/blob/main.js"),
      ...["--blobHost", "127.0.0.1", "--blobPort", String(port), "--location", dir],
      ...["--silent", "--skipApiVersionCheck", "--loose"],
    ],
    { cwd: ROOT, stdio: ["ignore", "pipe", "pipe"] },
  );
  let out = "";
  child.stdout!.on("data", (d) => {
    out += d;
  });
  child.stderr!.on("data", (d) => {
    out += d;
  });
  const connectionString = [
    "DefaultEndpointsProtocol=http",
    "AccountName=devstoreaccount1",
    `AccountKey=${AZURITE_KEY}`,
    `BlobEndpoint=http://127.0.0.1:${port}/devstoreaccount1`,
  ].join(";");
  const service = BlobServiceClient.fromConnectionString(connectionString);
  const deadline = Date.now() + 30_000;
  for (;;) {
    try {
      await service.getProperties();
      break;
    } catch (e) {
      if (child.exitCode !== null || Date.now() > deadline)
        throw new Error(`Azurite did not start: ${e}\n${out}`);
      await new Promise((r) => setTimeout(r, 100));
    }
  }
  return {
    name: "azurite",
    url: `http://127.0.0.1:${port}`,
    pid: child.pid!,
    connectionString,
    async stop() {
      if (child.exitCode !== null || child.signalCode !== null) return;
      const exited = new Promise<void>((r) => child.once("exit", () => r()));
      child.kill("SIGTERM");
      const force = setTimeout(() => child.kill("SIGKILL"), 3_000);
      await exited;
      clearTimeout(force);
    },
  };
}

/** How one side of the comparison moves the object. */
type Side = { put(key: string, mib: number): Promise<void>; get(key: string, mib: number): Promise<void> };

/** PUT/GET through an S3 endpoint (the gateway, or the S3 store itself), `headers` on every PUT. */
function httpSide(ep: Endpoint, headers: Record<string, string>): Side {
  return {
    async put(key, mib) {
      await ep.ok({
        method: "PUT",
        path: objectPath(BUCKET, key),
        headers: { ...headers, "content-length": String(mib * MiB) },
        body: bodyStream(mib),
      });
    },
    async get(key, mib) {
      const res = await ep.ok({ method: "GET", path: objectPath(BUCKET, key), discard: true });
      if (res.bytes !== mib * MiB) throw new Error(`${ep.name} GET ${key}: ${res.bytes} bytes`);
    },
  };
}

function azureSide(connectionString: string): Side {
  const container = BlobServiceClient.fromConnectionString(connectionString).getContainerClient(BUCKET);
  return {
    async put(key, mib) {
      await container.getBlockBlobClient(key).uploadStream(bodyStream(mib), 8 * MiB, 4);
    },
    async get(key, mib) {
      const got = await container.getBlockBlobClient(key).download();
      let bytes = 0;
      await pipeline(
        got.readableStreamBody as NodeJS.ReadableStream,
        new Writable({
          write(chunk: Buffer, _enc, done) {
            bytes += chunk.length;
            done();
          },
        }),
      );
      if (bytes !== mib * MiB) throw new Error(`azure direct GET ${key}: ${bytes} bytes`);
    },
  };
}

async function fencedHeaders(gateway: Endpoint): Promise<Record<string, string>> {
  const lease = await gateway.ok({
    method: "POST",
    path: "/_fence/v1/leases",
    headers: { "content-type": "application/json" },
    body: Buffer.from(JSON.stringify({ bucket: BUCKET, prefix: "", ttlMs: 3_600_000 })),
  });
  return { "x-fence-token": (JSON.parse(lease.body.toString()) as { fencingToken: string }).fencingToken };
}

export async function remoteStreamingBench(opts: RemoteStreamingOptions): Promise<Row[]> {
  const dir = mkdtempSync(join(tmpdir(), "fencegate-bench-remote-"));
  const servers: Server[] = [];
  const endpoints: Endpoint[] = [];
  const rows: Row[] = [];
  const label = opts.mib >= 1024 ? `${opts.mib / 1024} GiB` : `${opts.mib} MiB`;
  try {
    for (const backend of opts.backends) {
      let gateway: Server;
      let direct: Side;
      let storeName: string;
      if (backend === "s3") {
        const store = await startFencegate(join(dir, "s3-store"), { FENCEGATE_FENCING: "optional" }, "store");
        servers.push(store);
        gateway = await startFencegate(
          join(dir, "s3-gateway"),
          {
            FENCEGATE_BACKEND: "s3",
            FENCEGATE_S3_ENDPOINT: store.url,
            FENCEGATE_S3_ACCESS_KEY_ID: FENCEGATE_CREDS.accessKeyId,
            FENCEGATE_S3_SECRET_ACCESS_KEY: FENCEGATE_CREDS.secretAccessKey,
            FENCEGATE_S3_FORCE_PATH_STYLE: "true",
          },
          "gateway on s3",
        );
        const storeEp = new Endpoint("s3 store", store.url, FENCEGATE_CREDS, 1);
        endpoints.push(storeEp);
        direct = httpSide(storeEp, {});
        storeName = "direct to the S3 store (a fencegate on fs)";
      } else {
        const azurite = await startAzurite(join(dir, "azurite"));
        servers.push(azurite);
        gateway = await startFencegate(
          join(dir, "azure-gateway"),
          { FENCEGATE_BACKEND: "azure", FENCEGATE_AZURE_CONNECTION_STRING: azurite.connectionString },
          "gateway on azure",
        );
        direct = azureSide(azurite.connectionString);
        storeName = "direct to Azurite (Azure SDK)";
      }
      servers.push(gateway);
      const gatewayEp = new Endpoint(gateway.name, gateway.url, FENCEGATE_CREDS, 1);
      endpoints.push(gatewayEp);
      await gatewayEp.ok({ method: "PUT", path: `/${BUCKET}` });
      const through = httpSide(gatewayEp, await fencedHeaders(gatewayEp));
      const sides = { fencegate: through, direct };

      for (const op of ["PUT", "GET"] as const) {
        const rss: number[] = [];
        const r = await alternate(["fencegate", "direct"] as const, opts.rounds, async (name) => {
          const key = `${name}-${opts.mib}`;
          const move = () => (op === "PUT" ? sides[name].put(key, opts.mib) : sides[name].get(key, opts.mib));
          const started = performance.now();
          if (name === "fencegate") rss.push((await withPeakRss(gateway.pid, move)).growthMiB);
          else await move();
          return (opts.mib * MiB) / 1e6 / ((performance.now() - started) / 1000);
        });
        rows.push({
          name: `${op} ${label}${op === "PUT" ? " fenced" : ""}, ${backend} backend`,
          value: r.fencegate.median,
          unit: "MB/s",
          baselineName: storeName,
          baseline: r.direct.median,
        });
        rows.push({
          name: `gateway peak RSS growth, ${op} ${label}, ${backend} backend`,
          value: Math.max(...rss),
          unit: "MiB",
          baselineName: "bound",
          baseline: 100,
          target: { kind: "value<=", bound: 100 },
        });
      }
    }
    return rows;
  } finally {
    for (const ep of endpoints) ep.close();
    for (const s of servers.reverse()) await s.stop();
    rmSync(dir, { recursive: true, force: true });
  }
}

if (import.meta.filename === process.argv[1]) {
  const { values } = parseArgs({
    options: {
      rounds: { type: "string", default: "2" },
      mib: { type: "string", default: "1024" },
      backends: { type: "string", default: "s3,azure" },
    },
  });
  const rows = await remoteStreamingBench({
    rounds: Number(values.rounds),
    mib: Number(values.mib),
    backends: values.backends.split(",") as ("s3" | "azure")[],
  });
  console.log(table(rows));
}
