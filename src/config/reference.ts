import { stringify } from "yaml";
import { z } from "zod";
import { configSchema } from "./schema.js";

/**
 * The reference configuration (config/fencegate.yaml), generated from the schema: every field,
 * with its default where it has one, commented out with an example where it has none, and the
 * other types of a backend or lease store as commented-out blocks. `npm run config:reference`
 * writes it; test/config/reference-config.test.ts fails when the committed file differs.
 */

/** A JSON Schema node, as zod's toJSONSchema writes it. */
export type SchemaNode = {
  type?: string | string[];
  properties?: Record<string, SchemaNode>;
  additionalProperties?: SchemaNode | boolean;
  propertyNames?: SchemaNode;
  items?: SchemaNode;
  oneOf?: SchemaNode[];
  anyOf?: SchemaNode[];
  default?: unknown;
  const?: unknown;
  enum?: unknown[];
  required?: string[];
};

/** The configuration schema as JSON Schema (the input side: defaults are optional). */
export function configJsonSchema(): SchemaNode {
  return z.toJSONSchema(configSchema, { io: "input", unrepresentable: "any" }) as SchemaNode;
}

/** A field's comment, and an example for a field without a default (or a record's entry name). */
type Doc = { doc?: string; example?: unknown };

/**
 * Keyed by the field's path; entries of a record are `*`, every backend of `backends` is
 * documented as `backend`. A field missing here is still written, without a comment.
 */
const DOCS: Record<string, Doc> = {
  server: { doc: "Where the gateway listens, and its limits on clients." },
  "server.host": { doc: "FENCEGATE_HOST; a non-loopback address needs real credentials and signing key" },
  "server.port": { doc: "FENCEGATE_PORT; 0 picks a free port (printed at start)" },
  "server.domain": {
    doc: "FENCEGATE_DOMAIN: virtual-hosted style, <bucket>.<domain>",
    example: "s3.example.internal",
  },
  "server.maxHeaderBytes": { doc: "larger request header sections get 400 RequestHeaderSectionTooLarge" },
  "server.headersTimeoutMs": { doc: "a client must send its header section within this (slowloris)" },
  "server.idleTimeoutMs": { doc: "connections silent this long are closed (0: never); > leases.maxWaitMs" },
  "server.keepAliveTimeoutMs": {
    doc: "idle keep-alive connections close after this (longer than a balancer's 60 s)",
  },
  "server.requestTimeoutMs": {
    doc: "a whole request must arrive within this (0: no limit, for large uploads)",
  },
  "server.healthTimeoutMs": { doc: "health and readiness answer within this; a slower dependency is down" },
  "server.shutdownTimeoutMs": { doc: "SIGTERM/SIGINT: the process exits within this" },
  dataDir: { doc: "FENCEGATE_DATA_DIR: embedded state and the filesystem backend" },
  gatewayId: {
    doc: "FENCEGATE_GATEWAY_ID: this replica's name in the audit log (default: gw-<random>)",
    example: "gw-1",
  },
  rootCredential: {
    doc: "The root access key, an administrator (FENCEGATE_ACCESS_KEY_ID / FENCEGATE_SECRET_ACCESS_KEY).\nWithout any access key, the development pair fencegate / fencegate-secret is used, on loopback only.",
  },
  "rootCredential.accessKeyId": { example: "root" },
  "rootCredential.secretAccessKey": { example: "change-me-please" },
  credentials: { doc: "Further access keys (SigV4), each with its own rights." },
  "credentials.accessKeyId": { example: "team-a" },
  "credentials.secretAccessKey": { example: "change-me-too" },
  "credentials.admin": { doc: "administrators renew, release and break anyone's lease" },
  "credentials.allow": { doc: "without allow: read, write and lease everywhere" },
  "credentials.allow.bucket": { doc: 'a bucket, or "*" for every bucket', example: "shared" },
  "credentials.allow.prefix": { doc: "keys under this prefix only", example: "team-a/" },
  "credentials.allow.actions": { example: ["read", "write", "lease"] },
  fencing: { doc: "Which writes need a fencing token." },
  "fencing.default": { doc: "FENCEGATE_FENCING: required | optional" },
  "fencing.buckets": { doc: "per bucket", example: "scratch" },
  "fencing.buckets.*": { example: "optional" },
  tokens: {
    doc: "Token-signing keys (HMAC). The active key (default: the first) signs; every listed key verifies,\nso a key is rotated by adding the new one as active and removing the old one after the longest TTL.\nWithout keys, one is generated in dataDir on first start (loopback only).\nFENCEGATE_TOKEN_SIGNING_KEY sets a single key.",
  },
  "tokens.keys": {},
  "tokens.keys.id": { example: "k2" },
  "tokens.keys.secret": { doc: "at least 16 characters", example: "at-least-16-characters-new" },
  "tokens.activeKeyId": { example: "k2" },
  leases: { doc: "Bounds of what a lease request may ask." },
  transactions: {
    doc: "Fenced transactions (docs/transactions.md): what one may stage, what all open ones may hold.",
  },
  "transactions.maxObjects": { doc: "objects staged in one transaction" },
  "transactions.maxOpen": { doc: "transactions open at once on this gateway" },
  "transactions.maxMemoryBytes": {
    doc: "small staged bodies held in memory for all open transactions together; beyond, in files",
  },
  pools: {
    doc: "Ownership groups: the keys under prefix spread over groups, leased per group.",
    example: "tiles",
  },
  "pools.*.bucket": { example: "maps" },
  "pools.*.prefix": { example: "tiles/" },
  "pools.*.groups": { example: 64 },
  backend: {
    doc: "The default backend (FENCEGATE_BACKEND): buckets not listed under `buckets` live there, under their own name.",
  },
  "backend.root": {
    doc: "the filesystem backend's root (default: <dataDir>/objects)",
    example: "/srv/objects",
  },
  "backend.endpoint": {
    doc: "FENCEGATE_S3_ENDPOINT; absent for Amazon S3",
    example: "http://127.0.0.1:9000",
  },
  "backend.region": { doc: "FENCEGATE_S3_REGION" },
  "backend.accessKeyId": {
    doc: "FENCEGATE_S3_ACCESS_KEY_ID; without it, the AWS SDK's credential chain",
    example: "backend-key",
  },
  "backend.secretAccessKey": { doc: "FENCEGATE_S3_SECRET_ACCESS_KEY", example: "backend-secret" },
  "backend.forcePathStyle": { doc: "FENCEGATE_S3_FORCE_PATH_STYLE (MinIO and most S3-compatible stores)" },
  "backend.requestTimeoutMs": { doc: "every call to the store gives up after this (503 to the client)" },
  "backend.metaPrefix": { doc: "fencegate's own namespace in every store bucket", example: ".fencegate/" },
  "backend.partSizeBytes": { doc: "large bodies go to the store in parts of this size", example: 8388608 },
  "backend.gcIntervalMs": { doc: "how often unreferenced blobs are collected (0: never)" },
  "backend.gcGraceMs": { doc: "unreferenced blobs younger than this are left alone" },
  "backend.verifyBucket": {
    doc: "a scratch bucket where conditional writes are checked at start-up",
    example: "fencegate-verify",
  },
  "backend.systemBucket": {
    doc: "FENCEGATE_SYSTEM_BUCKET: fencegate's own records (token epochs); default fencegate-system",
    example: "fencegate-system",
  },
  "backend.connectionString": {
    doc: "FENCEGATE_AZURE_CONNECTION_STRING (account key or SAS), or accountUrl with one of the next",
    example:
      "DefaultEndpointsProtocol=https;AccountName=myaccount;AccountKey=base64key==;EndpointSuffix=core.windows.net",
  },
  "backend.accountUrl": { example: "https://myaccount.blob.core.windows.net" },
  "backend.accountName": { example: "myaccount" },
  "backend.accountKey": { example: "base64key==" },
  "backend.sasToken": { example: "sv=...&sig=..." },
  "backend.defaultCredential": { doc: "DefaultAzureCredential (needs @azure/identity)", example: true },
  "backend.blockSizeBytes": {
    doc: "bodies larger than this go as staged blocks of this size",
    example: 8388608,
  },
  "backend.hierarchicalNamespace": { doc: "ADLS Gen2; asked from the account when absent", example: true },
  backends: { doc: "Further backends, by name, for the buckets under `buckets`.", example: "lake" },
  buckets: {
    doc: "Gateway buckets that live elsewhere than the default backend, or under a prefix.",
    example: "reports",
  },
  "buckets.*.backend": { doc: 'a name under backends, or "default"' },
  "buckets.*.target": {
    doc: "the bucket or container in the store (default: the same name)",
    example: "company-lake",
  },
  "buckets.*.prefix": { doc: "a key prefix inside the target" },
  "buckets.*.fencing": { doc: "overrides fencing.default for this bucket", example: "optional" },
  multipart: { doc: "Uploads neither completed nor aborted." },
  "multipart.maxAgeMs": { doc: "are removed after this long" },
  "multipart.sweepIntervalMs": { doc: "how often they are looked for (0: never)" },
  leaseStore: {
    doc: "Where leases and tokens live: embedded, redis (FENCEGATE_REDIS_URL) or redlock (FENCEGATE_REDLOCK_URLS).",
  },
  "leaseStore.url": { doc: "FENCEGATE_REDIS_URL", example: "redis://127.0.0.1:6379" },
  "leaseStore.urls": {
    doc: "FENCEGATE_REDLOCK_URLS: independent Redis masters (3 or 5)",
    example: ["redis://r1:6379", "redis://r2:6379", "redis://r3:6379"],
  },
  "leaseStore.keyPrefix": {
    doc: "every key starts with this, the same for every replica",
    example: "{fencegate}",
  },
  "leaseStore.epochs": { doc: "older configurations' place for token epochs (names the system bucket)" },
  "leaseStore.epochs.bucket": { example: "fencegate-system" },
  "leaseStore.epochs.prefix": { example: ".fencegate/redis-epochs/" },
  "leaseStore.unsafeSettings": { doc: "Redis settings that break mutual exclusion: refuse (503) or warn" },
  "leaseStore.commandTimeoutMs": { doc: "a command unanswered after this fails (503)", example: 2000 },
  "leaseStore.quarantineAfterLoss": { doc: "after Redis lost its data, grant nothing for leases.maxTtlMs" },
  audit: { doc: "The audit log: embedded, or one log in Redis shared by every replica." },
  "audit.type": { doc: "default: redis with a Redis lease store, embedded otherwise", example: "redis" },
  "audit.url": { doc: "default: the lease store's Redis", example: "redis://127.0.0.1:6379" },
  "audit.keyPrefix": { example: "{fencegate}" },
  "audit.retention": { doc: "records beyond these limits move from Redis to JSON Lines segments" },
  "audit.retention.maxRecords": { example: 1000000 },
  "audit.retention.maxAgeMs": { example: 604800000 },
  "audit.retention.archiveDir": { doc: "a directory every replica reads, or:", example: "/shared/audit" },
  "audit.retention.archiveBucket": { doc: "a bucket of the storage backend", example: "audit-archive" },
  metrics: {
    doc: "Prometheus metrics at /_fence/v1/metrics: loopback peers, or anyone with the bearer token.",
  },
  "metrics.port": { doc: "FENCEGATE_METRICS_PORT: also serve them on a port of their own", example: 9701 },
  "metrics.host": {
    doc: "FENCEGATE_METRICS_HOST: that listener's address (default: server.host)",
    example: "0.0.0.0",
  },
  "metrics.token": {
    doc: "FENCEGATE_METRICS_TOKEN: Authorization: Bearer <token> for non-loopback peers",
    example: "change-me",
  },
  log: {},
  "log.level": { doc: "FENCEGATE_LOG_LEVEL: fatal, error, warn, info, debug, trace or silent" },
};

const HEADER = `# fencegate configuration: every field, with its default; fields without one are commented out
# with an example, and so are the other types of a backend or lease store. Start with
#   FENCEGATE_CONFIG=config/fencegate.yaml npm start
# Environment variables (named beside their fields) override this file field by field.
# An unknown field is an error. Generated from src/config/schema.ts by \`npm run config:reference\`.
`;

export function referenceConfig(): string {
  const root = configJsonSchema();
  const out: string[] = [HEADER];
  for (const [name, node] of Object.entries(root.properties ?? {})) {
    out.push(...section(name, node, root.required?.includes(name) ?? false));
  }
  return `${out.join("\n").trimEnd()}\n`;
}

/** A top-level field and its comment, followed by a blank line. */
function section(name: string, node: SchemaNode, required: boolean): string[] {
  // A scalar's comment goes beside it; a section's above it.
  const scalarField = !isUnion(node) && !isObject(node) && !isRecord(node) && node.type !== "array";
  const above = scalarField ? [] : prose(DOCS[name]?.doc, 0);
  const lines = [...above, ...field(name, node, [name], 0, false, required)];
  return [...lines, ""];
}

function prose(doc: string | undefined, indent: number): string[] {
  if (!doc) return [];
  return doc.split("\n").map((l) => `${" ".repeat(indent)}# ${l}`);
}

function docOf(path: string[]): Doc | undefined {
  const key = path.join(".");
  if (DOCS[key]) return DOCS[key];
  // Every backend under `backends` is documented as the default backend.
  if (path[0] === "backends" && path.length > 2) return DOCS[["backend", ...path.slice(2)].join(".")];
  return undefined;
}

const variants = (node: SchemaNode): SchemaNode[] => node.oneOf ?? node.anyOf ?? [];
const isUnion = (node: SchemaNode) =>
  variants(node).length > 0 && variants(node).every((v) => v.properties?.type);
const isRecord = (node: SchemaNode) => typeof node.additionalProperties === "object" && !node.properties;
const isObject = (node: SchemaNode) => node.properties !== undefined;

/** A scalar (or a flow list) as YAML writes it on one line. */
function scalar(value: unknown): string {
  return stringify(value, { collectionStyle: "flow", lineWidth: 0 }).trimEnd();
}

function trailing(line: string, doc: string | undefined): string {
  return doc && !doc.includes("\n") ? `${line}  # ${doc}` : line;
}

/**
 * The lines of one field at `indent`. `commented`: inside a commented-out block already (the
 * caller comments every line). Fields with a default are written with it; fields without one
 * are commented out with an example.
 */
function field(
  name: string,
  node: SchemaNode,
  path: string[],
  indent: number,
  commented: boolean,
  required = false,
): string[] {
  const pad = " ".repeat(indent);
  const doc = docOf(path);
  if (isUnion(node)) return union(name, node, path, indent, commented);
  if (isObject(node)) {
    const needed = node.required ?? [];
    const children = Object.entries(node.properties!).flatMap(([k, child]) =>
      field(k, child, [...path, k], indent + 2, commented, needed.includes(k)),
    );
    const anyActive = children.some((l) => !l.trimStart().startsWith("#"));
    const head = path.length > 1 ? trailing(`${pad}${name}:`, doc?.doc) : `${pad}${name}:`;
    // An optional section without a default is written only as an example.
    const present = node.default !== undefined || required;
    if (commented || (anyActive && present)) return [head, ...children];
    // Nothing but optional fields: the whole block commented out, with examples.
    return commentOut(
      [
        head,
        ...Object.entries(node.properties!).flatMap(([k, c]) => field(k, c, [...path, k], indent + 2, true)),
      ],
      indent,
    );
  }
  if (isRecord(node)) return record(name, node, path, indent, commented);
  if (node.type === "array" && node.items && isObject(node.items)) {
    const items = Object.entries(node.items.properties!).flatMap(([k, child]) =>
      field(k, child, [...path, k], indent + 4, true),
    );
    items[0] = items[0]!.replace(/^(\s*) {2}/, "$1- ");
    const head = path.length > 1 ? trailing(`${pad}${name}:`, doc?.doc) : `${pad}${name}:`;
    return commented ? [head, ...items] : commentOut([head, ...items], indent);
  }
  const value = node.default !== undefined ? node.default : (doc?.example ?? placeholder(node));
  const line = trailing(`${pad}${name}: ${scalar(value)}`, doc?.doc);
  if (node.default !== undefined || commented) return [line];
  return commentOut([line], indent);
}

/** A value for a field with neither default nor example: its constant, first choice, or type. */
function placeholder(node: SchemaNode): unknown {
  if (node.const !== undefined) return node.const;
  if (node.enum) return node.enum[0];
  if (node.type === "boolean") return false;
  if (node.type === "integer" || node.type === "number") return 0;
  if (node.type === "array") return [];
  return "";
}

/** A record: its default (`{}`), then one example entry commented out. */
function record(
  name: string,
  node: SchemaNode,
  path: string[],
  indent: number,
  commented: boolean,
): string[] {
  const pad = " ".repeat(indent);
  const doc = docOf(path);
  const entry = node.additionalProperties as SchemaNode;
  const example = typeof doc?.example === "string" ? doc.example : "example";
  const entryLines =
    isObject(entry) || isUnion(entry)
      ? field(example, entry, [...path, "*"], indent + 2, true)
      : [
          `${" ".repeat(indent + 2)}${example}: ${scalar(docOf([...path, "*"])?.example ?? placeholder(entry))}`,
        ];
  const head = `${pad}${name}:`;
  if (commented) return [trailing(head, path.length > 1 ? doc?.doc : undefined), ...entryLines];
  const active = trailing(`${head} ${scalar(node.default ?? {})}`, path.length > 1 ? doc?.doc : undefined);
  return [active, ...commentOut([head, ...entryLines], indent)];
}

/**
 * A backend or lease store: the default type written out (or the first, commented out, where
 * there is no default), then every other type as a commented-out block.
 */
function union(name: string, node: SchemaNode, path: string[], indent: number, commented: boolean): string[] {
  const pad = " ".repeat(indent);
  const defaultType = (node.default as { type?: string } | undefined)?.type;
  const out: string[] = [];
  const ordered = [...variants(node)].sort((a, b) =>
    a.properties!.type!.const === defaultType ? -1 : b.properties!.type!.const === defaultType ? 1 : 0,
  );
  for (const variant of ordered) {
    const type = variant.properties!.type!.const as string;
    const active = !commented && type === defaultType;
    const children = Object.entries(variant.properties!).flatMap(([k, child]) =>
      k === "type"
        ? [`${pad}  type: ${type}`]
        : field(k, child, [...path, k], indent + 2, !active || commented),
    );
    const head = `${pad}${name}:`;
    if (active) out.push(head, ...children);
    else if (commented) out.push(...(out.length > 0 ? [`${pad}# or:`] : []), head, ...children);
    else out.push(`${pad}# or, type ${type}:`, ...commentOut([head, ...children], indent));
  }
  return out;
}

/** Comments out lines written at `indent` or deeper: `# ` at that column, the rest kept. */
function commentOut(lines: string[], indent: number): string[] {
  const pad = " ".repeat(indent);
  return lines.map((l) => (l.startsWith(`${pad}#`) ? l : `${pad}# ${l.slice(indent)}`));
}
