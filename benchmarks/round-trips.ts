/**
 * Store round trips of one fenced PutObject through each remote backend, counted on the wire by
 * a proxy between the gateway and the store (counts, not times), next to an unfenced
 * pass-through: the same small PUT sent straight to the store through the same proxy.
 *
 * - s3: the store is a second fencegate (fs backend, fencing optional) in this process; the
 *   gateway under test runs the S3 backend against it through the proxy.
 * - azure: the store is Azurite (in memory); the gateway runs the Azure backend through the proxy.
 *
 * "record remembered": the same key written again and again by the same gateway (it remembers the
 * key's record and its ETag); "not remembered": a key another replica wrote first. Each figure is
 * the median over the writes of the requests sent between the write's start and its answer; the
 * "all requests" rows divide everything the proxy saw (the once-a-second read of the bucket's
 * state and the batched removal of replaced blobs included) by the writes.
 *
 *   npx tsx benchmarks/round-trips.ts [--quick] [--backends s3,azure]
 */
import { parseArgs } from "node:util";
import { BlobServiceClient } from "@azure/storage-blob";
import { azuriteConnectionString, startAzurite } from "../test/support/azurite.js";
import { type HttpFaultProxy, startHttpFaultProxy } from "../test/support/fault-proxy.js";
import { CREDENTIALS, startTestGateway, type TestGateway } from "../test/support/gateway.js";
import { Endpoint, objectPath } from "./lib/http-client.js";
import { type Row, table } from "./lib/report.js";

type Backend = "s3" | "azure";

type Store = {
  proxy: HttpFaultProxy;
  backend: Record<string, unknown>;
  /** One unfenced PUT of `body` straight to the store (through the proxy). */
  passThrough(bucket: string, key: string, body: Buffer): Promise<void>;
  stop(): Promise<void>;
};

async function s3Store(): Promise<Store> {
  const store = await startTestGateway({ env: { FENCEGATE_FENCING: "optional" } });
  const proxy = await startHttpFaultProxy(store.url);
  const direct = new Endpoint("store", proxy.url, CREDENTIALS, 1);
  return {
    proxy,
    backend: {
      type: "s3",
      endpoint: proxy.url,
      region: "us-east-1",
      accessKeyId: CREDENTIALS.accessKeyId,
      secretAccessKey: CREDENTIALS.secretAccessKey,
      forcePathStyle: true,
      gcIntervalMs: 0,
    },
    async passThrough(bucket, key, body) {
      await direct.ok({ method: "PUT", path: objectPath(bucket, key), body });
    },
    async stop() {
      direct.close();
      await proxy.close();
      await store.stop();
    },
  };
}

async function azureStore(): Promise<Store> {
  const azurite = await startAzurite({ inMemory: true });
  const proxy = await startHttpFaultProxy(azurite.url);
  const client = BlobServiceClient.fromConnectionString(azuriteConnectionString(proxy.port));
  return {
    proxy,
    backend: { type: "azure", connectionString: azuriteConnectionString(proxy.port) },
    async passThrough(bucket, key, body) {
      await client.getContainerClient(bucket).getBlockBlobClient(key).upload(body, body.length);
    },
    async stop() {
      await proxy.close();
      await azurite.stop();
    },
  };
}

const median = (xs: number[]): number => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length % 2 ? s[(s.length - 1) / 2]! : (s[s.length / 2 - 1]! + s[s.length / 2]!) / 2;
};

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

async function signed(gw: TestGateway, method: string, path: string, body?: Buffer, token?: string) {
  const ep = new Endpoint("gateway", gw.url, CREDENTIALS, 1);
  try {
    return await ep.ok({
      method,
      path,
      ...(body ? { body } : {}),
      ...(token ? { headers: { "x-fence-token": token } } : {}),
    });
  } finally {
    ep.close();
  }
}

async function measure(backend: Backend, writes: number): Promise<Row[]> {
  const store = backend === "s3" ? await s3Store() : await azureStore();
  const gw = await startTestGateway({ overrides: { backend: store.backend } });
  const other = await startTestGateway({ overrides: { backend: store.backend } });
  const bucket = `rt-${backend}-${Date.now().toString(36)}`;
  const body = Buffer.alloc(4096, 0x61);
  const rows: Row[] = [];
  try {
    await signed(gw, "PUT", `/${bucket}`);
    const lease = await gw.leases.acquire({ bucket, prefix: "", ttlMs: 600_000 });
    const theirs = await other.leases.acquire({ bucket, prefix: "", ttlMs: 600_000 });
    const put = (g: TestGateway, key: string, token: string) =>
      signed(g, "PUT", objectPath(bucket, key), body, token);
    // Warm up: the store's capabilities, the bucket's state.
    await put(gw, "k", lease.fencingToken);
    await put(gw, "k", lease.fencingToken);
    const perWrite = async (run: () => Promise<unknown>) => {
      const from = store.proxy.seen.length;
      await run();
      return store.proxy.seen.length - from;
    };

    // The unfenced pass-through.
    const plain: number[] = [];
    for (let i = 0; i < writes; i++)
      plain.push(await perWrite(() => store.passThrough(bucket, `plain/${i}`, body)));

    // The same key again and again: the gateway remembers its record.
    const remembered: number[] = [];
    const from = store.proxy.seen.length;
    for (let i = 0; i < writes; i++) remembered.push(await perWrite(() => put(gw, "k", lease.fencingToken)));
    await sleep(1_500); // the batched removal of replaced blobs
    const rememberedAll = (store.proxy.seen.length - from) / writes;

    // Keys another replica wrote first (tokens: each gateway's own lease store; the HCT of a
    // key is that of its last write, so this gateway's token must not be below the other's).
    const fresh: number[] = [];
    for (let i = 0; i < writes; i++) {
      const key = `other/${i}`;
      await put(other, key, theirs.fencingToken);
      fresh.push(await perWrite(() => put(gw, key, lease.fencingToken)));
    }
    if (lease.token < theirs.token) throw new Error("the tokens of the two gateways are out of order");

    const name = backend === "s3" ? "S3" : "Azure";
    const [cachedBound, uncachedBound] = backend === "s3" ? [2, 3] : [1, 2];
    const baseline = median(plain);
    rows.push(
      {
        name: `${name}: store requests per fenced PUT, record remembered (median)`,
        value: median(remembered),
        baselineName: "unfenced pass-through PUT",
        baseline,
        unit: "req",
        target: { kind: "value<=", bound: cachedBound },
      },
      {
        name: `${name}: store requests per fenced PUT, not remembered (median)`,
        value: median(fresh),
        baselineName: "unfenced pass-through PUT",
        baseline,
        unit: "req",
        target: { kind: "value<=", bound: uncachedBound },
      },
      {
        name: `${name}: all store requests per fenced PUT, record remembered (mean, background included)`,
        value: rememberedAll,
        baselineName: "unfenced pass-through PUT",
        baseline,
        unit: "req",
      },
    );
    return rows;
  } finally {
    await other.stop();
    await gw.stop();
    await store.stop();
  }
}

export async function roundTripBench(opts: { quick: boolean; backends?: Backend[] }): Promise<Row[]> {
  const rows: Row[] = [];
  for (const backend of opts.backends ?? (["s3", "azure"] as const)) {
    rows.push(...(await measure(backend, opts.quick ? 10 : 40)));
  }
  return rows;
}

if (import.meta.filename === process.argv[1]) {
  const { values } = parseArgs({
    options: {
      quick: { type: "boolean", default: false },
      backends: { type: "string", default: "s3,azure" },
    },
  });
  const rows = await roundTripBench({
    quick: values.quick,
    backends: values.backends.split(",") as Backend[],
  });
  console.log(table(rows));
  process.exit(0);
}
