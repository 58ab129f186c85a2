import { z } from "zod";

const policy = z.enum(["required", "optional"]);

const credential = z.object({
  accessKeyId: z.string().min(3).max(128),
  secretAccessKey: z.string().min(8).max(256),
});

const signingKey = z.object({
  id: z.string().regex(/^[A-Za-z0-9_-]{1,64}$/, "letters, digits, _ and - only (1-64)"),
  secret: z.string().min(16, "at least 16 characters"),
});

const fsBackend = z.object({ type: z.literal("fs"), root: z.string().optional() });
const s3Backend = z.object({
  type: z.literal("s3"),
  endpoint: z.string().optional(),
  region: z.string().default("us-east-1"),
  accessKeyId: z.string().optional(),
  secretAccessKey: z.string().optional(),
  forcePathStyle: z.boolean().default(false),
});
const azureBackend = z.object({ type: z.literal("azure"), connectionString: z.string().min(1) });

const leaseStore = z.discriminatedUnion("type", [
  z.object({ type: z.literal("embedded") }),
  z.object({ type: z.literal("redis"), url: z.string().min(1) }),
  z.object({ type: z.literal("redlock"), urls: z.array(z.string().min(1)).min(1) }),
]);

export const configSchema = z
  .object({
    server: z
      .object({
        host: z.string().min(1).default("127.0.0.1"),
        port: z.number().int().min(0).max(65535).default(9700),
        /** Virtual-hosted-style addressing: `<bucket>.<domain>`. */
        domain: z.string().optional(),
        /** Largest request header section accepted, in bytes (S3 allows 8 KiB of user metadata). */
        maxHeaderBytes: z
          .number()
          .int()
          .min(1024)
          .max(1 << 20)
          .default(16 * 1024),
      })
      .strict()
      .default({ host: "127.0.0.1", port: 9700, maxHeaderBytes: 16 * 1024 }),
    dataDir: z.string().min(1).default("./data"),
    gatewayId: z.string().min(1).optional(),
    /** The root credential (FENCEGATE_ACCESS_KEY_ID / FENCEGATE_SECRET_ACCESS_KEY). */
    rootCredential: credential.optional(),
    /** Further access keys, all with the same rights. */
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
    backend: z.discriminatedUnion("type", [fsBackend, s3Backend, azureBackend]).default({ type: "fs" }),
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
    log: z
      .object({
        level: z.enum(["fatal", "error", "warn", "info", "debug", "trace", "silent"]).default("info"),
      })
      .strict()
      .default({ level: "info" }),
  })
  .strict();

export type Config = z.infer<typeof configSchema>;
export type FencingPolicyName = z.infer<typeof policy>;
