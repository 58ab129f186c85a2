import { z } from "zod";
import { AuditQuery, components, ListQuery } from "../src/api/schemas.js";

/**
 * The OpenAPI 3.1 document of the lease API: its operations, described here, and its messages,
 * generated from the schemas the API validates with (src/api/schemas.ts). Written to
 * src/api/openapi.json by scripts/generate-openapi.ts; the gateway serves that file at
 * /_fence/v1/openapi.json, and a test fails when it and this document differ.
 */

type Json = Record<string, unknown>;
const ref = (kind: string, name: string) => ({ $ref: `#/components/${kind}/${name}` });
const json = (schema: Json) => ({ content: { "application/json": { schema } } });
const answer = (description: string, schema?: string | Json) => ({
  description,
  ...(schema === undefined ? {} : json(typeof schema === "string" ? ref("schemas", schema) : schema)),
});
/** An error answer: `E400` etc. name a shared response, other text describes this one. */
const error = (description: string) => answer(description, "Error");
const path = (name: string, schema: Json = { type: "string" }, description?: string) => ({
  name,
  in: "path",
  required: true,
  schema,
  ...(description ? { description } : {}),
});

/** The query parameters of a query schema, each with its own schema and description. */
function queryParameters(query: z.ZodObject): Json[] {
  return Object.entries(query.shape).map(([name, field]) => {
    const { description, $schema: _, ...schema } = z.toJSONSchema(field as z.ZodType, { io: "input" });
    return { name, in: "query", required: false, schema, ...(description ? { description } : {}) };
  });
}

type Operation = {
  tags: string[];
  operationId: string;
  summary: string;
  description?: string;
  security?: [];
  parameters?: Json[];
  requestBody?: Json;
  /** Each status: a shared response's name (E400, …) or the response itself. */
  responses: Record<string, string | Json>;
};

function operation({ responses, ...op }: Operation) {
  const all = { ...responses, default: "Error" };
  return {
    ...op,
    responses: Object.fromEntries(
      Object.entries(all).map(([status, r]) => [status, typeof r === "string" ? ref("responses", r) : r]),
    ),
  };
}

const body = (name: string | Json, required: boolean) => ({
  required,
  ...json(typeof name === "string" ? ref("schemas", name) : name),
});

const HEALTH_DEADLINE =
  "is checked in parallel within the health deadline (`server.healthTimeoutMs`, 2 s by default); one that has not answered by then is reported as down (`timeout`), never waited for.";
const readiness = {
  "200": answer(
    "Every dependency (each backend, the lease store, the audit log) answered within the deadline.",
    "Health",
  ),
  "503": answer(
    "A dependency answered with an error or not within the deadline (named in `failing`), or the gateway is shutting down.",
    "Unhealthy",
  ),
};
const leaseLost = error("`LeaseLost`: the lease has ended.");
const leaseParam = [ref("parameters", "leaseId")];
const transactionParam = [ref("parameters", "transactionId")];

const paths = {
  "/leases": {
    post: operation({
      tags: ["leases"],
      operationId: "acquireLease",
      summary: "Acquire a lease on a key or a prefix",
      description:
        "Grants a lease with a new fencing token, strictly larger than every token granted before. Leases on overlapping resources (a key and a prefix containing it, two nested prefixes) are mutually exclusive: while one is held, a request waits up to `waitMs` and then answers 409 `LeaseHeld`.",
      requestBody: body("AcquireRequest", true),
      responses: {
        "201": answer("The lease granted.", "Lease"),
        "400": "E400",
        "403": "E403",
        "409": answer("`LeaseHeld`: an overlapping lease is still held after `waitMs`.", "LeaseHeldError"),
        "503": "E503",
      },
    }),
    get: operation({
      tags: ["leases"],
      operationId: "listLeases",
      summary: "List the active leases",
      parameters: queryParameters(ListQuery),
      responses: {
        "200": answer("The active leases.", "LeaseList"),
        "400": "E400",
        "403": "E403",
        "503": "E503",
      },
    }),
  },
  "/leases/{leaseId}": {
    parameters: leaseParam,
    get: operation({
      tags: ["leases"],
      operationId: "getLease",
      summary: "Show a lease",
      responses: {
        "200": answer("The lease.", "Lease"),
        "400": "E400",
        "403": "E403",
        "404": "E404",
        "503": "E503",
      },
    }),
    delete: operation({
      tags: ["leases"],
      operationId: "releaseLease",
      summary: "Release a lease",
      description:
        "Ends the lease at once; a later write with its token is refused. Only the principal that acquired it (or an administrator) may release it.",
      responses: { "204": answer("Released."), "400": "E400", "403": "E403", "404": "E404", "503": "E503" },
    }),
  },
  "/leases/{leaseId}/renew": {
    parameters: leaseParam,
    post: operation({
      tags: ["leases"],
      operationId: "renewLease",
      summary: "Renew a lease",
      description:
        "Extends the lease to `ttlMs` (default: its current TTL) from now. The token stays the same. An expired or superseded lease answers 409 `LeaseLost`.",
      requestBody: body("RenewRequest", false),
      responses: {
        "200": answer("The renewed lease.", "Lease"),
        "400": "E400",
        "403": "E403",
        "404": "E404",
        "409": error("`LeaseLost`: the lease expired or was superseded."),
        "503": "E503",
      },
    }),
  },
  "/leases/{leaseId}/break": {
    parameters: leaseParam,
    post: operation({
      tags: ["leases"],
      operationId: "breakLease",
      summary: "Break a lease (administrators only)",
      description:
        "Ends the lease whoever holds it and, before answering, raises the fencing floor of what it covered: a key's highest committed token becomes `floorToken`; for a prefix, the ended lease is the floor every write under it is checked against; commits in flight are fenced. The old holder's next write is refused even though nobody else wrote. Recorded as `LeaseBroken`. Other access keys get 403 `AccessDenied`.",
      responses: {
        "200": answer("The broken lease and its floor token.", "BrokenLease"),
        "403": "E403",
        "404": "E404",
        "503": "E503",
      },
    }),
  },
  "/leases/{leaseId}/delegates": {
    parameters: leaseParam,
    post: operation({
      tags: ["leases"],
      operationId: "addDelegate",
      summary: "Create a delegate credential",
      description:
        "For the lease's owner (the access key that acquired it) or an administrator; never a delegate (403 `AccessDenied`). Answers an access key pair that may renew the lease and write with its token, but neither release it nor delegate further. Recorded as `LeaseDelegateAdded`. 409 `LeaseLost` when the lease has ended.",
      responses: {
        "201": answer("The delegate and its secret.", "NewDelegate"),
        "409": leaseLost,
        "403": "E403",
        "404": "E404",
        "503": "E503",
      },
    }),
    get: operation({
      tags: ["leases"],
      operationId: "listDelegates",
      summary: "List a lease's delegates",
      description: "For the owner, its delegates and administrators. Secrets are never listed.",
      responses: {
        "200": answer("The delegates, in creation order.", "DelegateList"),
        "403": "E403",
        "404": "E404",
        "503": "E503",
      },
    }),
  },
  "/leases/{leaseId}/delegates/{delegateId}": {
    parameters: [...leaseParam, path("delegateId")],
    delete: operation({
      tags: ["leases"],
      operationId: "removeDelegate",
      summary: "Revoke a delegate",
      description:
        "For the lease's owner or an administrator. The delegate's credential stops working at once. Recorded as `LeaseDelegateRemoved`.",
      responses: { "204": answer("Revoked."), "403": "E403", "404": "E404", "503": "E503" },
    }),
  },
  "/pools/{pool}/claims": {
    parameters: [path("pool")],
    post: operation({
      tags: ["pools"],
      operationId: "claimGroups",
      summary: "Claim a fair share of a pool's groups (also the worker's heartbeat)",
      description:
        "Renews the worker's group leases, releases groups above its share and takes free groups up to it. A write to a key of the pool is covered by its group's lease and checked with its group's token.",
      requestBody: body("ClaimRequest", true),
      responses: {
        "200": answer("The worker's groups after this claim.", "Claim"),
        "400": "E400",
        "403": "E403",
        "404": "E404",
        "503": "E503",
      },
    }),
  },
  "/pools/{pool}/claims/{owner}": {
    parameters: [path("pool"), path("owner")],
    delete: operation({
      tags: ["pools"],
      operationId: "leavePool",
      summary: "Leave a pool",
      description: "Releases every group lease of the worker, for the others to claim.",
      responses: {
        "200": answer("How many group leases were released.", "Released"),
        "400": "E400",
        "403": "E403",
        "404": "E404",
        "503": "E503",
      },
    }),
  },
  "/leases/{leaseId}/transactions": {
    parameters: leaseParam,
    post: operation({
      tags: ["transactions"],
      operationId: "openTransaction",
      summary: "Open a fenced transaction on a lease",
      description:
        "Writes that carry the transaction (header `x-fence-transaction`, user metadata `fence-transaction`, or the query parameter `x-fence-transaction`) besides the lease's fencing token are checked like any fenced write and staged: invisible to reads, listings and HEAD until the commit, which makes all of them visible in one atomic step or none. Only the lease's principal or its delegates may open one; the transaction ends with its lease.",
      requestBody: body({ type: "object" }, false),
      responses: {
        "201": answer("The transaction, open.", "NewTransaction"),
        "400": "E400",
        "403": "E403",
        "404": "E404",
        "409": leaseLost,
        "501": error("`NotImplemented`: the bucket's backend does not offer transactions."),
        "503": "E503",
      },
    }),
  },
  "/transactions/{transactionId}": {
    parameters: transactionParam,
    get: operation({
      tags: ["transactions"],
      operationId: "getTransaction",
      summary: "Show a transaction",
      responses: {
        "200": answer("Its state and objects.", "Transaction"),
        "403": "E403",
        "404": "E404",
        "503": "E503",
      },
    }),
    delete: operation({
      tags: ["transactions"],
      operationId: "abortTransaction",
      summary: "Abort a transaction",
      description:
        "Nothing it staged becomes visible; its staged bytes are removed. Aborting an aborted transaction answers 204 again.",
      responses: {
        "204": answer("Aborted."),
        "403": "E403",
        "404": "E404",
        "409": error("`TransactionCommitted`: it was committed."),
        "503": "E503",
      },
    }),
  },
  "/transactions/{transactionId}/commit": {
    parameters: transactionParam,
    post: operation({
      tags: ["transactions"],
      operationId: "commitTransaction",
      summary: "Commit a transaction",
      description:
        "In one atomic step: for every staged object `token >= HCT` (and its write conditions), and the lease current; then every staged write becomes visible and every HCT becomes the token. Otherwise nothing becomes visible and the transaction is aborted. A repeated commit of a committed transaction answers 200 with the same body. A commit whose outcome is unknown answers 503 with `x-fence-outcome: unknown`.",
      responses: {
        "200": answer("Committed.", "TransactionCommit"),
        "403": "E403",
        "404": "E404",
        "409": error(
          "`StaleFencingToken` (naming the first key whose HCT is higher), `LeaseExpired`, `InvalidFencingToken`, `PreconditionFailed`: refused, nothing visible, the transaction aborted; `TransactionAborted`: it was aborted before.",
        ),
        "412": error(
          "`PreconditionFailed`: a staged write's condition no longer holds; nothing visible, the transaction aborted.",
        ),
        "503": error(
          "`ServiceUnavailable`, with `x-fence-outcome: unknown` when the commit may or may not have happened.",
        ),
      },
    }),
  },
  "/audit": {
    get: operation({
      tags: ["audit"],
      operationId: "queryAudit",
      summary: "Query the audit log",
      description: "Records in commit order, a page at a time; follow `nextCursor` for the next page.",
      parameters: queryParameters(AuditQuery),
      responses: {
        "200": answer("A page of records.", "AuditPage"),
        "400": "E400",
        "403": "E403",
        "503": "E503",
      },
    }),
  },
  "/health": {
    get: operation({
      tags: ["service"],
      operationId: "health",
      summary: "Health of the gateway and its dependencies (readiness)",
      description: `The same answer as /health/ready, under the endpoint's original name. Every dependency ${HEALTH_DEADLINE}`,
      security: [],
      responses: readiness,
    }),
  },
  "/health/live": {
    get: operation({
      tags: ["service"],
      operationId: "healthLive",
      summary: "Liveness: the process serves",
      description:
        "Answered by the process alone: no dependency is called, so a slow or unreachable store never makes it fail.",
      security: [],
      responses: { "200": answer("The gateway process serves requests.", "Live") },
    }),
  },
  "/health/ready": {
    get: operation({
      tags: ["service"],
      operationId: "healthReady",
      summary: "Readiness: every dependency answers within the health deadline",
      description: `Every dependency (each backend, the lease store, the audit log) ${HEALTH_DEADLINE}`,
      security: [],
      responses: readiness,
    }),
  },
  "/metrics": {
    get: operation({
      tags: ["service"],
      operationId: "metrics",
      summary: "Prometheus metrics",
      description:
        "The gateway's metrics in the Prometheus text exposition format (version 0.0.4): requests, fencing decisions, lease events and waits, active leases and waiters, store calls, group commits, audit appends, Redis connectivity, dependency checks and the process's own metrics. Answered without a signature to a request from the loopback interface; from anywhere else only with `Authorization: Bearer <FENCEGATE_METRICS_TOKEN>`. Also served on a listener of its own when `FENCEGATE_METRICS_PORT` is set. Labels never hold a key, a bucket, an access key, a token or a secret.",
      security: [],
      responses: {
        "200": { description: "The exposition.", content: { "text/plain": { schema: { type: "string" } } } },
        "401": error(
          "Not from the loopback interface and without the bearer token (or no token is configured): `Unauthorized`.",
        ),
      },
    }),
  },
  "/openapi.json": {
    get: operation({
      tags: ["service"],
      operationId: "openapi",
      summary: "This description (OpenAPI 3.1)",
      security: [],
      responses: {
        "200": answer("The OpenAPI document.", {
          type: "object",
          required: ["openapi", "paths"],
          properties: { openapi: { type: "string", pattern: "^3\\.1\\." } },
        }),
      },
    }),
  },
};

/** The named schemas: answers as the API sends them, requests as it accepts them. */
function schemas(): Record<string, Json> {
  const convert = (io: "input" | "output") =>
    z.toJSONSchema(components, { io, target: "draft-2020-12", uri: (id) => `#/components/schemas/${id}` })
      .schemas as Record<string, Json>;
  const output = convert("output");
  const input = convert("input");
  return Object.fromEntries(
    Object.keys(output).map((name) => {
      const { $schema: _s, $id: _i, ...schema } = (name.endsWith("Request") ? input : output)[name]!;
      return [name, schema];
    }),
  );
}

/** The document (its `servers` name the default address; the API names the one that served it). */
export function openApiDocument() {
  return withoutSafeIntegerBounds({
    openapi: "3.1.0",
    info: {
      title: "fencegate lease API",
      version: "1",
      summary: "Leases with fencing tokens for writes through the fencegate S3 gateway.",
      description:
        'The JSON API of a fencegate gateway, under /_fence/v1 on the gateway\'s own host. Every call but /health (and /health/live, /health/ready) and /openapi.json is signed with AWS Signature V4 (service `s3`, any region) with the same access keys as the S3 endpoint, e.g. `curl --aws-sigv4 "aws:amz:us-east-1:s3" --user KEY:SECRET`. Errors are JSON: `{"error": {"code", "message", ...details}}`; every response carries an `x-amz-request-id` header. A lease\'s `fencingToken` is the string a write carries (header `x-fence-token`, metadata header `x-amz-meta-fence-token`, or the query parameter `x-fence-token`); the S3 endpoint refuses a write whose token is below the object\'s highest committed token, or whose lease expired or was superseded.',
      license: { name: "Apache-2.0", identifier: "Apache-2.0" },
    },
    servers: [{ url: "http://127.0.0.1:9700/_fence/v1", description: "a gateway on its default address" }],
    security: [{ sigv4: [] }],
    tags: [
      { name: "leases", description: "Acquire, inspect, renew and release leases." },
      { name: "pools", description: "Ownership groups: a fair share of a pool's groups for each worker." },
      { name: "audit", description: "The audit log of write decisions and lease events." },
      { name: "service", description: "Health and this description." },
      {
        name: "transactions",
        description:
          "Fenced transactions: several writes under one lease, visible all together or not at all.",
      },
    ],
    paths,
    components: {
      securitySchemes: {
        sigv4: {
          type: "apiKey",
          in: "header",
          name: "Authorization",
          description:
            "AWS Signature Version 4 (AWS4-HMAC-SHA256, service `s3`), with the gateway's access keys; signed query parameters (presigned URLs) work too.",
        },
      },
      parameters: {
        leaseId: path("leaseId", { type: "string", minLength: 1 }),
        transactionId: path("transactionId", { type: "string" }, "The transaction's id, as opened."),
      },
      schemas: schemas(),
      responses: {
        Error: error("An error."),
        E400: error(
          "`InvalidRequest` (a bad body or parameter), or a malformed signature (`AuthorizationHeaderMalformed`, …).",
        ),
        E403: error(
          "Authentication failed (`InvalidAccessKeyId`, `SignatureDoesNotMatch`, `RequestTimeTooSkewed`) or `AccessDenied`: this principal may not do this.",
        ),
        E404: error("`LeaseNotFound`: no such lease, or it was released."),
        E503: error(
          "`LeaseStoreUnavailable`: the lease store or audit log does not answer; the gateway guesses nothing.",
        ),
      },
    },
  });
}

/** Without the bounds zod gives every integer (±2^53 - 1): they say nothing to a reader. */
function withoutSafeIntegerBounds<T>(doc: T): T {
  return JSON.parse(JSON.stringify(doc), (_k, v) => {
    if (v === null || typeof v !== "object" || Array.isArray(v)) return v;
    const { minimum, maximum, ...rest } = v as Json;
    return {
      ...rest,
      ...(minimum === undefined || minimum === -Number.MAX_SAFE_INTEGER ? {} : { minimum }),
      ...(maximum === undefined || maximum === Number.MAX_SAFE_INTEGER ? {} : { maximum }),
    };
  }) as T;
}
