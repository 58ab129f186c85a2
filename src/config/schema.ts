import { z } from "zod";
import { ACTIONS } from "../access/access-policy.js";
import { routeOverlaps } from "../backends/routing/route-overlaps.js";
import { storeIdentity } from "../backends/routing/store-identity.js";
import { bucketNameProblem } from "../core/key-rules.js";

const policy = z.enum(["required", "optional"]);

const accessRule = z
  .object({
    /** A bucket name, or `*` for every bucket. */
    bucket: z.string().min(1),
    /** Keys under this prefix only; "" (the default) for the whole bucket. */
    prefix: z.string().default(""),
    actions: z.array(z.enum(ACTIONS)).min(1),
  })
  .strict();

const keyPair = {
  accessKeyId: z.string().min(3).max(128),
  secretAccessKey: z.string().min(8).max(256),
};

const credential = z
  .object({
    ...keyPair,
    /** Renews and releases anyone's lease, breaks leases; may do everything. */
    admin: z.boolean().default(false),
    /** What this key may read, write and lease; without it, everything (but not as an administrator). */
    allow: z.array(accessRule).optional(),
  })
  .strict();

const signingKey = z
  .object({
    id: z.string().regex(/^[A-Za-z0-9_-]{1,64}$/, "letters, digits, _ and - only (1-64)"),
    secret: z.string().min(16, "at least 16 characters"),
  })
  .strict();

const fsBackend = z.object({ type: z.literal("fs"), root: z.string().optional() }).strict();

/**
 * The bucket (container) of the default remote backend where fencegate keeps its own records: the
 * token epochs of a Redis or Redlock lease store. Created when missing; no S3 request reaches it.
 * FENCEGATE_SYSTEM_BUCKET. Default fencegate-system.
 */
const systemBucket = z
  .string()
  .refine((name) => bucketNameProblem(name) === null, { message: "not a valid bucket name" })
  .optional();
const s3Backend = z
  .object({
    type: z.literal("s3"),
    /** Empty or absent for Amazon S3. */
    endpoint: z.string().optional(),
    region: z.string().default("us-east-1"),
    /** Without them, the AWS SDK's default credential chain. */
    accessKeyId: z.string().optional(),
    secretAccessKey: z.string().optional(),
    forcePathStyle: z.boolean().default(false),
    /** Every call to the store gives up after this long (503 to the client). */
    requestTimeoutMs: z.number().int().min(100).max(600_000).default(30_000),
    /** fencegate's own namespace inside every store bucket (records, immutable blobs, uploads). */
    metaPrefix: z.string().min(1).max(128).optional(),
    /** Large bodies go to the store in parts of this size (bounded memory per upload). */
    partSizeBytes: z
      .number()
      .int()
      .min(5 * 1024 * 1024)
      .optional(),
    /** How often unreferenced blobs (replaced, refused, left by a crash) are collected; 0: never. */
    gcIntervalMs: z.number().int().min(0).default(3_600_000),
    /** Unreferenced blobs younger than this are left alone (a write in flight owns them). */
    gcGraceMs: z.number().int().min(0).default(3_600_000),
    /**
     * A scratch bucket where conditional writes are checked at start-up; the gateway refuses to
     * start when the store ignores them. Without it, each bucket is checked on its first write.
     */
    verifyBucket: z.string().min(3).optional(),
    systemBucket,
  })
  .strict();
const azureBackend = z
  .object({
    type: z.literal("azure"),
    /** A storage connection string (account key or SAS), or: */
    connectionString: z.string().min(1).optional(),
    /** The account's blob endpoint, e.g. https://acct.blob.core.windows.net, with one of: */
    accountUrl: z.string().url().optional(),
    accountName: z.string().optional(),
    accountKey: z.string().optional(),
    sasToken: z.string().optional(),
    /** DefaultAzureCredential (needs the @azure/identity package installed beside fencegate). */
    defaultCredential: z.boolean().optional(),
    requestTimeoutMs: z.number().int().min(100).max(600_000).default(30_000),
    /** fencegate's own blobs (multipart uploads) in every container. */
    metaPrefix: z.string().min(1).max(128).optional(),
    /** Bodies up to this size go in one Put Blob; larger ones in staged blocks of this size. */
    blockSizeBytes: z
      .number()
      .int()
      .min(1024 * 1024)
      .optional(),
    /** ADLS Gen2 (hierarchical namespace); asked from the account when absent. */
    hierarchicalNamespace: z.boolean().optional(),
    systemBucket,
  })
  .strict()
  .refine(
    (a) =>
      a.connectionString !== undefined ||
      (a.accountUrl !== undefined &&
        ((a.accountName !== undefined && a.accountKey !== undefined) ||
          a.sasToken !== undefined ||
          a.defaultCredential === true)),
    {
      message:
        "give connectionString, or accountUrl with accountName and accountKey, a sasToken, or defaultCredential: true",
    },
  );

const backendSpec = z.discriminatedUnion("type", [fsBackend, s3Backend, azureBackend]);

/** Where a configured gateway bucket lives. */
const bucketRoute = z
  .object({
    /** A name from `backends`, or "default" (the `backend` section). */
    backend: z.string().min(1).default("default"),
    /** The bucket or container in the store; the gateway bucket's own name when absent. */
    target: z.string().min(1).optional(),
    /** A key prefix inside the target, so that several gateway buckets can share one. */
    prefix: z
      .string()
      .refine((p) => !p.startsWith("/") && !/[\u0000-\u001f\\]/.test(p) && Buffer.byteLength(p) <= 512, {
        message:
          "a prefix must not start with '/', hold control characters or backslashes, or exceed 512 bytes",
      })
      .default(""),
    fencing: policy.optional(),
  })
  .strict();

/**
 * Older configurations' place for token epochs: `bucket` names the system bucket (as
 * backend.systemBucket does), and the epoch objects older versions wrote under `prefix` (default
 * `.fencegate/redis-epochs/`) in it still count, deleted ones included. Epochs are created in the
 * system bucket whether or not this is set (see src/server/lease-components.ts).
 */
const legacyEpochs = z
  .object({ bucket: z.string().min(1), prefix: z.string().min(1).optional() })
  .strict()
  .optional();

const embeddedLeaseStore = z.object({ type: z.literal("embedded") }).strict();
const redisLeaseStore = z
  .object({
    type: z.literal("redis"),
    url: z.string().min(1),
    /** Every key starts with this (a hash tag: one cluster slot), the same for every replica. */
    keyPrefix: z.string().min(1).max(128).optional(),
    epochs: legacyEpochs,
    /** Redis settings that break mutual exclusion (an eviction policy): refuse (503) or only warn. */
    unsafeSettings: z.enum(["refuse", "warn"]).default("refuse"),
    /** A Redis command unanswered after this long fails, and the request answers 503. */
    commandTimeoutMs: z.number().int().min(50).max(60_000).default(2_000),
    /**
     * After Redis lost its data, grant nothing (503) for leases.maxTtlMs, until every lease granted
     * before the loss has certainly expired.
     */
    quarantineAfterLoss: z.boolean().default(false),
  })
  .strict();
const redlockLeaseStore = z
  .object({
    type: z.literal("redlock"),
    /** Independent Redis masters (3 or 5): a majority must agree on every lease operation. */
    urls: z.array(z.string().min(1)).min(1),
    /** Every key starts with this on every instance, the same for every replica. */
    keyPrefix: z.string().min(1).max(128).optional(),
    epochs: legacyEpochs,
    /** A command unanswered by an instance after this long counts as no answer. Default 2 s. */
    commandTimeoutMs: z.number().int().min(50).max(60_000).optional(),
  })
  .strict();
const leaseStore = z.discriminatedUnion("type", [embeddedLeaseStore, redisLeaseStore, redlockLeaseStore]);

/** The fields a backend of this type has (a backend section changing type keeps these). */
export function backendFieldNames(type: string): readonly string[] {
  const spec = { fs: fsBackend, s3: s3Backend, azure: azureBackend }[type];
  return spec ? Object.keys(spec.shape) : [];
}

/** The fields a lease store of this type has. */
export function leaseStoreFieldNames(type: string): readonly string[] {
  const spec = { embedded: embeddedLeaseStore, redis: redisLeaseStore, redlock: redlockLeaseStore }[type];
  return spec ? Object.keys(spec.shape) : [];
}

/** The audit log: embedded, or one log in Redis shared by every replica, with its retention. */
const audit = z
  .object({
    /** Default: "redis" when the lease store is on one Redis, "embedded" otherwise. */
    type: z.enum(["embedded", "redis"]).optional(),
    /** The Redis of the shared log. Default: the lease store's. */
    url: z.string().min(1).optional(),
    /** The deployment's key prefix in Redis, the same for every replica. Default {fencegate}. */
    keyPrefix: z.string().min(1).max(128).optional(),
    /** Records beyond these limits move from Redis to JSON Lines segments in archiveDir. */
    retention: z
      .object({
        maxRecords: z.number().int().min(1_000).optional(),
        maxAgeMs: z.number().int().min(60_000).optional(),
        /** Segments in a directory every replica reads (a shared volume); or: */
        archiveDir: z.string().min(1).optional(),
        /** segments in a bucket of the storage backend, of their own (under `.fencegate/audit/`). */
        archiveBucket: z.string().min(1).optional(),
        segmentRecords: z.number().int().min(100).max(1_000_000).default(10_000),
        intervalMs: z.number().int().min(0).default(60_000),
      })
      .strict()
      .refine((r) => r.maxRecords !== undefined || r.maxAgeMs !== undefined, {
        message: "give maxRecords, maxAgeMs or both",
      })
      .refine((r) => (r.archiveDir === undefined) !== (r.archiveBucket === undefined), {
        message: "give archiveDir or archiveBucket (one of them)",
      })
      .optional(),
  })
  .strict()
  .default({});

export const configSchema = z
  .object({
    server: z
      .object({
        host: z.string().min(1).default("127.0.0.1"),
        port: z.number().int().min(0).max(65535).default(9700),
        /** Virtual-hosted-style addressing: `<bucket>.<domain>`. */
        domain: z.string().optional(),
        /**
         * The region the gateway answers as (FENCEGATE_REGION): HeadBucket's x-amz-bucket-region,
         * the LocationConstraint CreateBucket accepts, and in us-east-1 S3's legacy answer to a
         * CreateBucket of a bucket the caller already owns (200, nothing changed).
         */
        region: z
          .string()
          .regex(/^[a-z]{2}(-[a-z]+)+-\d{1,2}$/, "a region name such as us-east-1")
          .default("us-east-1"),
        /** Largest request header section accepted, in bytes (S3 allows 8 KiB of user metadata). */
        maxHeaderBytes: z
          .number()
          .int()
          .min(1024)
          .max(1 << 20)
          .default(16 * 1024),
        /** A client must send its whole header section within this long (slowloris clients). */
        headersTimeoutMs: z.number().int().min(100).max(600_000).default(10_000),
        /**
         * A connection with no traffic either way for this long is closed (0: never): idle sockets,
         * stalled uploads, readers that stop reading. Longer than any wait the server does on a
         * client's behalf (a lease acquisition waits up to leases.maxWaitMs without sending).
         */
        idleTimeoutMs: z.number().int().min(0).max(3_600_000).default(120_000),
        /**
         * An idle keep-alive connection is closed after this long between two requests. Longer
         * than the idle timeout of the load balancers commonly put in front (60 s), so that the
         * balancer, not the gateway, closes an idle connection: a client or balancer that reuses
         * a connection the gateway is closing at that moment sees a reset.
         */
        keepAliveTimeoutMs: z.number().int().min(100).max(600_000).default(65_000),
        /** A whole request, body included, must arrive within this long (0: no limit, for large uploads). */
        requestTimeoutMs: z.number().int().min(0).max(86_400_000).default(0),
        /** Health and readiness answer within this long: a dependency slower than that is reported as down. */
        healthTimeoutMs: z.number().int().min(50).max(60_000).default(2_000),
        /** SIGTERM/SIGINT: the process exits within this long, whatever its stores do. */
        shutdownTimeoutMs: z.number().int().min(100).max(600_000).default(10_000),
      })
      .strict()
      .refine((s) => s.requestTimeoutMs === 0 || s.requestTimeoutMs >= s.headersTimeoutMs, {
        message: "requestTimeoutMs must be 0 or at least headersTimeoutMs",
      })
      .default({
        host: "127.0.0.1",
        port: 9700,
        region: "us-east-1",
        maxHeaderBytes: 16 * 1024,
        headersTimeoutMs: 10_000,
        idleTimeoutMs: 120_000,
        keepAliveTimeoutMs: 65_000,
        requestTimeoutMs: 0,
        healthTimeoutMs: 2_000,
        shutdownTimeoutMs: 10_000,
      }),
    dataDir: z.string().min(1).default("./data"),
    gatewayId: z.string().min(1).optional(),
    /** The root credential (FENCEGATE_ACCESS_KEY_ID / FENCEGATE_SECRET_ACCESS_KEY). */
    rootCredential: z.object(keyPair).strict().optional(),
    /** Further access keys, each with its own rights (`allow`) and administrator flag. */
    credentials: z.array(credential).min(1).optional(),
    fencing: z
      .object({ default: policy.default("required"), buckets: z.record(z.string(), policy).default({}) })
      .strict()
      .default({ default: "required", buckets: {} }),
    tokens: z
      .object({ keys: z.array(signingKey).min(1).optional(), activeKeyId: z.string().optional() })
      .strict()
      .default({}),
    leases: z
      .object({
        minTtlMs: z.number().int().min(1).default(500),
        maxTtlMs: z.number().int().min(1).default(3_600_000),
        maxWaitMs: z.number().int().min(0).default(60_000),
      })
      .strict()
      .refine((l) => l.minTtlMs <= l.maxTtlMs, { message: "minTtlMs must not exceed maxTtlMs" })
      .default({ minTtlMs: 500, maxTtlMs: 3_600_000, maxWaitMs: 60_000 }),
    /** Fenced transactions: what one may stage, and what all open ones may hold. */
    transactions: z
      .object({
        maxObjects: z.number().int().min(1).max(1_000_000).default(10_000),
        maxOpen: z.number().int().min(1).default(10_000),
        maxMemoryBytes: z
          .number()
          .int()
          .min(0)
          .default(256 * 1024 * 1024),
      })
      .strict()
      .default({ maxObjects: 10_000, maxOpen: 10_000, maxMemoryBytes: 256 * 1024 * 1024 }),
    /** Ownership groups: the keys under `prefix` spread over `groups` groups, leased per group. */
    pools: z
      .record(
        z.string().regex(/^[A-Za-z0-9_-]{1,64}$/),
        z
          .object({
            bucket: z.string().min(3),
            prefix: z.string(),
            groups: z.number().int().min(1).max(4096),
          })
          .strict(),
      )
      .default({}),
    /** The default backend: buckets not configured under `buckets` live there, under their own name. */
    backend: backendSpec.default({ type: "fs" }),
    /** Further backends, by name, for the buckets configured under `buckets`. */
    backends: z.record(z.string().regex(/^[A-Za-z0-9_-]{1,64}$/), backendSpec).default({}),
    /** Gateway buckets that live elsewhere than the default backend, or under a prefix. */
    buckets: z.record(z.string(), bucketRoute).default({}),
    multipart: z
      .object({
        /** Uploads neither completed nor aborted are removed after this long. */
        maxAgeMs: z.number().int().min(60_000).default(86_400_000),
        /** How often abandoned uploads are looked for (0: never). */
        sweepIntervalMs: z.number().int().min(0).default(600_000),
      })
      .strict()
      .default({ maxAgeMs: 86_400_000, sweepIntervalMs: 600_000 }),
    leaseStore: leaseStore.default({ type: "embedded" }),
    audit,
    /**
     * Prometheus metrics (GET /_fence/v1/metrics). Served on the gateway's port; also on a
     * listener of their own when `port` is set. Without `token`, only loopback peers may read them.
     */
    metrics: z
      .object({
        /** A listener of its own for the metrics (0: any free port). */
        port: z.number().int().min(0).max(65535).optional(),
        /** Its listen address (default: server.host). */
        host: z.string().min(1).optional(),
        /** A bearer token that lets non-loopback peers read the metrics. */
        token: z.string().min(1).optional(),
      })
      .strict()
      .default({}),
    log: z
      .object({
        level: z.enum(["fatal", "error", "warn", "info", "debug", "trace", "silent"]).default("info"),
      })
      .strict()
      .default({ level: "info" }),
  })
  .strict()
  .superRefine((c, ctx) => {
    for (const [bucket, route] of Object.entries(c.buckets)) {
      if (route.backend !== "default" && !(route.backend in c.backends)) {
        ctx.addIssue({
          code: "custom",
          path: ["buckets", bucket, "backend"],
          message: `no backend named "${route.backend}" under backends (or use "default")`,
        });
      }
    }
    // One stored object, one gateway name: leases, commit intents and HCTs are kept per gateway
    // name, so two names for one object would not exclude each other. (A fallback name that is
    // a route's target is refused at request time, by the routed backend.)
    const located = Object.entries(c.buckets).flatMap(([name, route]) => {
      const spec = route.backend === "default" ? c.backend : c.backends[route.backend];
      if (!spec) return [];
      const store = storeIdentity(spec, c);
      return [{ name, backend: route.backend, store, target: route.target ?? name, prefix: route.prefix }];
    });
    for (const overlap of routeOverlaps(located)) {
      ctx.addIssue({ code: "custom", path: ["buckets", overlap.second.name], message: overlap.message });
    }
    if (c.server.idleTimeoutMs !== 0 && c.server.idleTimeoutMs <= c.leases.maxWaitMs) {
      ctx.addIssue({
        code: "custom",
        path: ["server", "idleTimeoutMs"],
        message: `must be 0 or longer than leases.maxWaitMs (${c.leases.maxWaitMs} ms): a lease request waits that long without traffic`,
      });
    }
    for (const [name, spec] of Object.entries(c.backends)) {
      if (spec.type !== "fs" && spec.systemBucket !== undefined) {
        ctx.addIssue({
          code: "custom",
          path: ["backends", name, "systemBucket"],
          message: "only the default backend (`backend`) holds the system bucket",
        });
      }
    }
    const epochsBucket = c.leaseStore.type === "embedded" ? undefined : c.leaseStore.epochs?.bucket;
    const system = c.backend.type === "fs" ? undefined : c.backend.systemBucket;
    if (epochsBucket !== undefined && system !== undefined && epochsBucket !== system) {
      ctx.addIssue({
        code: "custom",
        path: ["leaseStore", "epochs", "bucket"],
        message: `names the system bucket ${epochsBucket}, but backend.systemBucket (or FENCEGATE_SYSTEM_BUCKET) names ${system}: keep one`,
      });
    }
    const fs = [c.backend, ...Object.values(c.backends)].filter((b) => b.type === "fs");
    if (fs.length > 1) {
      ctx.addIssue({
        code: "custom",
        path: ["backends"],
        message: "at most one fs backend: its metadata lives in the gateway's own database",
      });
    }
  });

export type Config = z.infer<typeof configSchema>;
export type BackendSpec = z.infer<typeof backendSpec>;
