import { createHash, randomBytes } from "node:crypto";
import { createEmbeddedAuditLog } from "../../src/audit/embedded/embedded-audit-log.js";
import { createFsBackend } from "../../src/backends/fs/index.js";
import { createEmbeddedLeaseStore } from "../../src/leases/embedded/embedded-lease-store.js";
import { openEmbeddedDb } from "../../src/sqlite/db.js";

/**
 * Fills a data directory before a gateway starts on it: state that would take hours to build
 * through the API, written straight into the tables the components create (so the rows are
 * exactly what the components would have written).
 */

const HOUR = 60 * 60 * 1000;

/** `n` live leases in `bucket`, key and prefix leases alternating, none overlapping another. */
export function populateLeases(dataDir: string, bucket: string, n: number): void {
  const db = openEmbeddedDb({ dataDir });
  try {
    createEmbeddedLeaseStore({ db });
    const now = Date.now();
    const insert = db.prepare(
      `INSERT INTO lease_leases (lease_id, bucket, key, prefix, owner, token, ttl_ms, acquired_at, expires_at)
       VALUES (?, ?, ?, ?, 'populate', ?, ?, ?, ?)`,
    );
    db.transaction(() => {
      const first = (db.prepare("SELECT value FROM lease_counter WHERE id = 1").get() as { value: number })
        .value;
      for (let i = 0; i < n; i++) {
        const token = first + i + 1;
        const shard = `live/${i % 100}`;
        insert.run(
          randomBytes(16).toString("hex"),
          bucket,
          i % 2 === 0 ? `${shard}/key-${i}` : null,
          i % 2 === 0 ? null : `${shard}/prefix-${i}/`,
          token,
          3 * HOUR,
          now,
          now + 3 * HOUR,
        );
      }
      db.prepare("UPDATE lease_counter SET value = ? WHERE id = 1").run(first + n);
    })();
  } finally {
    db.close();
  }
}

export type AuditShape = {
  buckets: string[];
  /** Weights of the buckets, same order. */
  bucketWeights: number[];
  keys: number;
  ops: Array<[string, number]>;
  startMs: number;
  spanMs: number;
};

export const AUDIT_SHAPE: AuditShape = {
  buckets: ["data", "logs", "media", "archive", "tiny"],
  bucketWeights: [0.7, 0.2, 0.09, 0.009, 0.001],
  keys: 50_000,
  ops: [
    ["PutObject", 0.5],
    ["LeaseAcquired", 0.15],
    ["LeaseReleased", 0.15],
    ["DeleteObject", 0.1],
    ["LeaseRenewed", 0.08],
    ["LeaseExpired", 0.015],
    ["CopyObject", 0.005],
  ],
  startMs: Date.UTC(2026, 10, 1),
  spanMs: 10 * 24 * HOUR,
};

/** A key of the audit shape: `dir<d>/sub<s>/obj<n>`. */
export const auditKey = (i: number): string => `dir${i % 50}/sub${Math.floor(i / 50) % 20}/obj${i}`;

function weighted<T>(items: Array<[T, number]>, r: number): T {
  let acc = 0;
  for (const [item, w] of items) {
    acc += w;
    if (r < acc) return item;
  }
  return items[items.length - 1]![0];
}

/** `n` audit records shaped like a busy gateway's: skewed buckets and ops, 3% refusals, prefix leases. */
export function populateAudit(dataDir: string, n: number, shape: AuditShape = AUDIT_SHAPE): void {
  const db = openEmbeddedDb({ dataDir });
  try {
    createEmbeddedAuditLog({ db, gatewayId: "populate" });
    const insert = db.prepare(
      `INSERT INTO audit_records (time, time_ms, op, bucket, key, prefix, token, lease_id, owner, principal,
         decision, reason, highest_token, request_id, gateway)
       VALUES (@time, @timeMs, @op, @bucket, @key, @prefix, @token, @leaseId, 'owner', 'fencegate',
         @decision, @reason, @token, @requestId, 'populate')`,
    );
    let seed = 12345;
    const random = () => {
      seed = (seed * 1103515245 + 12345) & 0x7fffffff;
      return seed / 0x7fffffff;
    };
    const buckets = shape.buckets.map((b, i) => [b, shape.bucketWeights[i]!] as [string, number]);
    db.transaction(() => {
      for (let i = 0; i < n; i++) {
        const timeMs = shape.startMs + Math.floor((i / n) * shape.spanMs);
        const op = weighted(shape.ops, random());
        const prefixLease = op.startsWith("Lease") && random() < 0.1;
        const key = auditKey(Math.floor(random() * shape.keys));
        const rejected = random() < 0.03;
        insert.run({
          time: new Date(timeMs).toISOString(),
          timeMs,
          op,
          bucket: weighted(buckets, random()),
          key: prefixLease ? null : key,
          prefix: prefixLease ? key.slice(0, key.indexOf("/") + 1) : null,
          token: i + 1,
          leaseId: `lease-${Math.floor(i / 5)}`,
          decision: rejected ? "rejected" : "accepted",
          reason: rejected ? "StaleFencingToken" : null,
          requestId: `req-${i}`,
        });
      }
    })();
  } finally {
    db.close();
  }
}

/** A bucket of `n` small objects `obj/<8 digits>`, sharing one inline body. */
export async function populateObjects(dataDir: string, bucket: string, n: number): Promise<void> {
  const db = openEmbeddedDb({ dataDir });
  try {
    const backend = await createFsBackend({ dataDir, db, multipartSweepIntervalMs: 0 });
    await backend.createBucket(bucket);
    await backend.close();
    const body = Buffer.from("listed object\n");
    const bodyId = Number(db.prepare("INSERT INTO fs_bodies (data) VALUES (?)").run(body).lastInsertRowid);
    const insert = db.prepare(
      `INSERT INTO fs_objects (bucket, key, blob, inline_id, size, etag, last_modified, metadata, hct, deleted)
       VALUES (?, ?, NULL, ?, ?, ?, ?, '{"headers":{},"userMetadata":{}}', NULL, 0)`,
    );
    const etag = `"${createHash("md5").update(body).digest("hex")}"`;
    const now = Date.now();
    db.transaction(() => {
      for (let i = 0; i < n; i++)
        insert.run(bucket, `obj/${String(i).padStart(8, "0")}`, bodyId, body.length, etag, now);
    })();
  } finally {
    db.close();
  }
}
