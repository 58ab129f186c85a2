import { z } from "zod";
import { DEFAULT_AUDIT_LIMIT, MAX_AUDIT_LIMIT } from "../audit/audit-log.js";
import { DomainError } from "../core/errors.js";
import { bucketNameProblem, MAX_OBJECT_KEY_BYTES, objectKeyProblem } from "../core/key-rules.js";
import { textProblem } from "../leases/lease-rules.js";

/**
 * The lease API's messages, written once: the API validates requests with these schemas, its
 * OpenAPI document (src/api/openapi.ts, served at /_fence/v1/openapi.json and kept in
 * src/api/openapi.json) is generated from them, and the client SDK's types (src/client/types.ts)
 * are inferred from them with type-only imports. A schema registered in `components` is a named
 * schema of the document; its description is the document's.
 */
export const components = z.registry<{ id: string; description?: string }>();

function named<T extends z.ZodType>(id: string, schema: T, description?: string): T {
  components.add(schema, { id, ...(description ? { description } : {}) });
  return schema;
}

/** A string refused, with the message given, when `problem` names one. */
const checked = (schema: z.ZodString, problem: (s: string) => string | null) =>
  schema.check((ctx) => {
    const message = problem(ctx.value);
    if (message) ctx.issues.push({ code: "custom", message, input: ctx.value });
  });

/** A whole number of milliseconds (the bounds are the lease service's, configurable). */
const millis = (name: string, required: boolean) =>
  z.int({
    error: (issue) =>
      issue.input === undefined && required
        ? `${name} is required (milliseconds)`
        : `${name} must be a number of milliseconds`,
  });

const dateTime = () => z.string().meta({ format: "date-time" });
const CONTROL = /[\u0000-\u001f\u007f]/;
const OWNER = "owner must be a string of 1 to 256 characters";

/**
 * A prefix is accepted when some valid key starts with it: the key rules applied to the prefix
 * followed by one more character (its last segment may still grow, so "a/." and "a/.." are fine
 * as prefixes of "a/.x" and "a/..x"; "../" and "/x" are not).
 */
export function prefixProblem(prefix: string): string | null {
  if (prefix === "") return null;
  if (Buffer.byteLength(prefix, "utf8") > MAX_OBJECT_KEY_BYTES) {
    return `prefix must be at most ${MAX_OBJECT_KEY_BYTES} bytes long (UTF-8)`;
  }
  const problem = objectKeyProblem(`${prefix}x`);
  if (problem && problem.reason !== "too-long") return problem.message.replace("object key", "prefix");
  return null;
}

/** An owner label: 1 to 256 characters of well-formed text without control characters. */
const owner = (description: string) =>
  checked(
    z.string({ error: OWNER }).min(1, OWNER).max(256, OWNER),
    (s) => textProblem("owner", s) ?? (CONTROL.test(s) ? "owner must not contain control characters" : null),
  )
    .optional()
    .meta({ description });

/** A request's input as its schema gives it, or 400 InvalidRequest naming the first problem. */
export function parseInput<T extends z.ZodType>(schema: T, input: unknown): z.output<T> {
  const parsed = schema.safeParse(input);
  if (parsed.success) return parsed.data;
  throw new DomainError("InvalidRequest", parsed.error.issues[0]?.message ?? "invalid request");
}

/** A query schema's parameters from a request's query string (an empty one is absent). */
export function parseQuery<T extends z.ZodObject>(
  schema: T,
  c: { req: { query(name: string): string | undefined } },
): z.output<T> {
  const query = Object.fromEntries(
    Object.keys(schema.shape).map((name) => [name, c.req.query(name) || undefined]),
  );
  return parseInput(schema, query);
}

// ---- requests ----------------------------------------------------------------------------------

/**
 * What to lease, by the S3 endpoint's own bucket and key rules (src/core/key-rules.ts), so that
 * nothing is leased that S3 would refuse to write, and nothing ill-formed (a lone UTF-16
 * surrogate, a NUL) reaches the lease store, the signed token or a backend.
 */
export const AcquireRequest = named(
  "AcquireRequest",
  z
    .object({
      bucket: checked(
        z.string({ error: "bucket is required" }).min(1, "bucket is required"),
        bucketNameProblem,
      ),
      key: checked(
        z.string({ error: "key must be a string of 1 to 1024 bytes" }).min(1, "object key must not be empty"),
        (k) => objectKeyProblem(k)?.message ?? null,
      )
        .optional()
        .meta({ description: "At most 1024 bytes." }),
      prefix: checked(z.string({ error: "prefix must be a string of at most 1024 bytes" }), prefixProblem)
        .optional()
        .meta({ description: "At most 1024 bytes." }),
      ttlMs: millis("ttlMs", true).meta({
        description: "Time to live in milliseconds; 500 to 3,600,000 by default (configurable).",
      }),
      waitMs: millis("waitMs", false)
        .default(0)
        .meta({ description: "How long to wait for an overlapping lease to end (at most 60,000)." }),
      owner: owner("A name for the holder; default: the access key id."),
    })
    .refine(
      (r) => (r.key === undefined) !== (r.prefix === undefined),
      'give exactly one of "key" or "prefix"',
    )
    .meta({ oneOf: [{ required: ["key"] }, { required: ["prefix"] }] }),
  "Exactly one of `key` (one object) or `prefix` (every key starting with it).",
);

export const RenewRequest = named(
  "RenewRequest",
  z.object({
    ttlMs: millis("ttlMs", false)
      .optional()
      .meta({ description: "New time to live from now; default: the lease's current TTL." }),
  }),
);

export const ClaimRequest = named(
  "ClaimRequest",
  z.object({
    ttlMs: millis("ttlMs", true),
    owner: owner("The worker's name (default: the access key id)."),
  }),
);

/** A listing filter from the query string: well-formed, or refused. */
export const filter = (name: string, description?: string) =>
  checked(z.string(), (s) => textProblem(name, s))
    .optional()
    .meta(description ? { description } : {});

export const ListQuery = z.object({
  bucket: filter("bucket"),
  prefix: filter("prefix", "Leases whose key or prefix starts with this."),
});

const LIMIT = `limit must be a whole number from 1 to ${MAX_AUDIT_LIMIT}`;

const instant = (name: string, description: string) =>
  dateTime()
    .check((ctx) => {
      if (Number.isNaN(Date.parse(ctx.value)) || !/^\d{4}-\d{2}-\d{2}/.test(ctx.value))
        ctx.issues.push({
          code: "custom",
          input: ctx.value,
          message: `${name} must be an ISO 8601 date-time, e.g. 2026-11-22T12:00:00Z`,
        });
    })
    .transform((s) => new Date(Date.parse(s)).toISOString())
    .optional()
    .meta({ description });

export const AuditQuery = z.object({
  bucket: z.string().optional(),
  key: z.string().optional(),
  prefix: z
    .string()
    .optional()
    .meta({ description: "Records whose key (or lease prefix) starts with this." }),
  leaseId: z.string().optional(),
  transactionId: z
    .string()
    .optional()
    .meta({ description: "Records of this fenced transaction: its staged writes and its commit or abort." }),
  decision: z
    .enum(["accepted", "rejected", "unknown"], {
      error: 'decision must be "accepted", "rejected" or "unknown"',
    })
    .optional(),
  op: z
    .string()
    .optional()
    .meta({ description: "An S3 operation (PutObject, …) or a lease event (LeaseAcquired, …)." }),
  since: instant("since", "Inclusive."),
  until: instant("until", "Exclusive."),
  limit: z.coerce
    .number<number | string>({ error: LIMIT })
    .int(LIMIT)
    .min(1, LIMIT)
    .max(MAX_AUDIT_LIMIT, LIMIT)
    .default(DEFAULT_AUDIT_LIMIT),
  cursor: z.string().optional().meta({ description: "The `nextCursor` of the previous page." }),
});

// ---- answers -----------------------------------------------------------------------------------

const leaseFields = {
  leaseId: z.string().min(1),
  bucket: z.string(),
  owner: z.string(),
  token: z
    .int()
    .min(1)
    .meta({ description: "The fencing token number: unique, strictly increasing in grant order." }),
  fencingToken: z.string().min(1).optional().meta({
    description:
      "The signed token string a write carries; opaque. Shown only to the access key that acquired the lease (and its delegates) and to administrators; absent for everyone else.",
  }),
  ttlMs: z.int(),
  acquiredAt: dateTime(),
  expiresAt: dateTime(),
  state: z.enum(["active", "expired", "released"]),
  waiters: z.int().min(0).optional().meta({
    description:
      "In listings only: how many acquire requests are queued in this gateway for the lease's resource.",
  }),
};

/** A lease's fields and `extra`, on exactly one of `key` or `prefix`. */
const onKeyOrPrefix = <S extends z.ZodRawShape>(extra: S) =>
  z.union([
    z.strictObject({ ...leaseFields, key: z.string(), prefix: z.never().optional(), ...extra }),
    z.strictObject({ ...leaseFields, prefix: z.string(), key: z.never().optional(), ...extra }),
  ]);

export const Lease = named(
  "Lease",
  onKeyOrPrefix({}),
  "A lease on one key (`key`) or on every key starting with a prefix (`prefix`).",
);

export const LeaseList = named("LeaseList", z.strictObject({ leases: z.array(Lease) }));

export const BrokenLease = named(
  "BrokenLease",
  onKeyOrPrefix({
    floorToken: z.int().min(1).meta({
      description:
        "A fresh token nobody holds: a broken key lease's object has its highest committed token raised to it; commits of the lease in flight are fenced with it.",
    }),
  }),
  "The broken lease (state `released`) and the fencing floor raised before the answer.",
);

const nullable = <T extends z.ZodType>(t: T) => t.nullable();

export const AuditRecord = named(
  "AuditRecord",
  z.strictObject({
    seq: z.int().min(1),
    time: dateTime(),
    op: z.string(),
    bucket: nullable(z.string()),
    key: nullable(z.string()),
    prefix: nullable(z.string()).optional(),
    token: nullable(z.int()),
    leaseId: nullable(z.string()),
    owner: nullable(z.string()).optional(),
    principal: nullable(z.string()).meta({ description: "The access key id." }),
    decision: z.enum(["accepted", "rejected", "unknown"]),
    reason: nullable(z.string()).meta({ description: "The error code when rejected." }),
    highestToken: nullable(z.int()),
    requestId: nullable(z.string()),
    gateway: z.string().meta({ description: "The instance id of the gateway that recorded it." }),
    transactionId: z.string().optional().meta({
      description:
        "The fenced transaction the record belongs to (a staged write, or the transaction's TransactionCommitted or TransactionAborted record). Absent on records outside a transaction.",
    }),
    keys: z.array(z.string()).max(10_000).optional().meta({
      description:
        "The keys a transaction's commit or abort covered (TransactionCommitted, TransactionAborted). Absent on other records.",
    }),
  }),
);

export const AuditPage = named(
  "AuditPage",
  z.strictObject({ records: z.array(AuditRecord), nextCursor: nullable(z.string()) }),
);

const HealthCheck = named(
  "HealthCheck",
  z.strictObject({
    kind: z
      .string()
      .meta({ description: "What the dependency is: fs, s3, azure, embedded, redis, redlock…" }),
    status: z.enum(["ok", "unavailable", "timeout"]).meta({
      description:
        "`unavailable`: it answered with an error; `timeout`: it did not answer within the deadline.",
    }),
    ms: z.int().min(0).meta({ description: "Milliseconds until it answered (or the deadline)." }),
    error: z.string().optional(),
  }),
);

const HealthChecks = named(
  "HealthChecks",
  z.record(z.string(), HealthCheck),
  "One entry per dependency: `backend` (and `backends.<name>` for each further configured backend), `leaseStore`, `auditLog`.",
);

const parts = {
  gateway: z.string().optional(),
  backend: z.string().optional(),
  leaseStore: z.string().optional(),
  auditLog: z.string().optional(),
};

export const Live = named("Live", z.looseObject({ status: z.literal("ok"), ...parts }));
export const Health = named(
  "Health",
  z.looseObject({ status: z.literal("ok"), ...parts, checks: HealthChecks.optional() }),
);
export const Unhealthy = named(
  "Unhealthy",
  z.looseObject({
    status: z.literal("unavailable"),
    error: z.string().optional(),
    failing: z
      .array(z.string())
      .optional()
      .meta({ description: "The dependencies that did not answer in time or answered with an error." }),
    draining: z.boolean().optional().meta({ description: "Present when the gateway is shutting down." }),
    ...parts,
    checks: HealthChecks.optional(),
  }),
);

export const ErrorAnswer = named(
  "Error",
  z.strictObject({
    error: z.looseObject({
      code: z
        .string()
        .regex(/^[A-Z][A-Za-z0-9]+$/)
        .meta({
          description:
            "LeaseHeld, LeaseLost, LeaseNotFound, LeaseStoreUnavailable, AccessDenied, InvalidRequest, InvalidAccessKeyId, SignatureDoesNotMatch, RequestTimeTooSkewed, AuthorizationHeaderMalformed, NotFound, MethodNotAllowed, PayloadTooLarge, InternalError, …",
        }),
      message: z.string(),
    }),
  }),
);

export const HeldBy = named(
  "HeldBy",
  z.strictObject({
    leaseId: z.string().optional(),
    bucket: z.string(),
    key: z.string().optional(),
    prefix: z.string().optional(),
    owner: z.string(),
    token: z.int(),
    expiresAt: dateTime(),
  }),
  "The lease in the way, without its token string; its leaseId only for the access key that holds it and administrators. Absent when the request gave up behind earlier queued requests rather than behind a holder.",
);

export const LeaseHeldError = named(
  "LeaseHeldError",
  z.strictObject({
    error: z.looseObject({
      code: z.literal("LeaseHeld"),
      message: z.string(),
      heldBy: HeldBy.optional(),
    }),
  }),
);

const delegateFields = {
  delegateId: z.string(),
  accessKeyId: z.string().meta({ description: "The delegate's access key id (SigV4), equal to delegateId." }),
  leaseId: z.string(),
  createdBy: z.string().meta({ description: "The access key that created it." }),
  createdAt: dateTime(),
};

export const Delegate = named(
  "Delegate",
  z.strictObject(delegateFields),
  "A delegate of a lease: an access key that may renew the lease, see its fencing token and write with it under the lease's resource, but neither release it nor delegate further.",
);
export const NewDelegate = named(
  "NewDelegate",
  z.strictObject({ ...delegateFields, secretAccessKey: z.string().min(1) }),
  "A new delegate, with its secret access key (shown only here, once).",
);
export const DelegateList = named("DelegateList", z.strictObject({ delegates: z.array(Delegate) }));

export const Claim = named(
  "Claim",
  z.strictObject({
    pool: z.string(),
    owner: z.string(),
    fairShare: z.number().meta({ description: "Groups divided by the active workers." }),
    workers: z.int(),
    target: z
      .int()
      .meta({ description: "The share this worker settles on: the floor or ceiling of the fair share." }),
    groups: z.array(z.strictObject({ group: z.int().min(0), lease: Lease })),
  }),
);

export const Released = named("Released", z.strictObject({ released: z.int().min(0) }));

const transactionFields = {
  transactionId: z.string(),
  leaseId: z.string(),
  token: z.int().min(0),
  bucket: z.string(),
  expiresAt: dateTime().meta({
    description: "The lease's expiry when the transaction was opened: the transaction ends with its lease.",
  }),
};

export const NewTransaction = named("NewTransaction", z.looseObject(transactionFields));

export const TransactionObject = named(
  "TransactionObject",
  z.union([
    z.strictObject({ key: z.string(), etag: z.string() }),
    z.strictObject({ key: z.string(), deleted: z.literal(true) }),
  ]),
);

export const Transaction = named(
  "Transaction",
  z.looseObject({
    ...transactionFields,
    state: z.enum(["open", "committed", "aborted"]),
    objects: z.array(TransactionObject).meta({
      description:
        "The staged writes (open), the committed ones (committed), the writes that were staged (aborted).",
    }),
    reason: z.string().optional().meta({
      description:
        "Why an aborted transaction ended: ClientAbort, LeaseExpired, LeaseLost, GatewayShutdown, or the code of the refusal of its commit.",
    }),
  }),
);

export const TransactionCommit = named(
  "TransactionCommit",
  z.looseObject({ transactionId: z.string(), token: z.int().min(0), objects: z.array(TransactionObject) }),
);
