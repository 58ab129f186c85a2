import { DomainError } from "../core/errors.js";
import { LruMap } from "../core/lru.js";
import type { SwapAnswer, TransactionLog, TxRead, TxRecord } from "../fence/commit-port.js";

/** The condition of a record's write: create it (none there yet), or replace the version read. */
export type RecordCondition = { ifNoneMatch: "*" } | { ifMatch: string };

/** What a conditional write of a record did: written, lost to another writer, or not known. */
export type RecordPut =
  | { outcome: "written"; etag: string | undefined }
  | { outcome: "lost" }
  | { outcome: "unknown"; error: unknown };

/**
 * The records of fenced transactions in a remote store's bucket, JSON (TxRecord), created with
 * If-None-Match: * and replaced with If-Match on the ETag read; each version holds a fresh nonce,
 * so If-Match is a true compare-and-swap. Committed and aborted are final: such records are
 * cached (any replica may keep them, they never change again). A store gives the record's name,
 * one conditional write and one read.
 */
export abstract class TransactionRecords {
  /** Final records by bucket and id. */
  private readonly final = new LruMap<TxRead>(10_000);

  protected abstract name(id: string): string;
  /** One conditional write of the record, never retried by the client. */
  protected abstract put(
    bucket: string,
    name: string,
    body: Buffer,
    conditions: RecordCondition,
  ): Promise<RecordPut>;
  /** The record's text and the ETag of that very version; null when there is none. */
  protected abstract getText(bucket: string, name: string): Promise<{ text: string; etag: string } | null>;

  /**
   * The log of one store bucket; `settle` resolves a key's pending write (the backend's key),
   * `checkBucket` refuses while the bucket is deleted or being deleted (CasPort.checkBucket).
   */
  log(
    bucket: string,
    settle: (key: string) => Promise<void>,
    checkBucket: () => Promise<void>,
  ): TransactionLog {
    return {
      create: (record) => this.create(bucket, record),
      read: (id) => this.read(bucket, id),
      swap: (from, next) => this.swap(bucket, from, next),
      settle,
      checkBucket,
    };
  }

  async create(bucket: string, record: TxRecord): Promise<boolean> {
    const put = await this.put(bucket, this.name(record.id), encode(record), { ifNoneMatch: "*" });
    if (put.outcome === "written") return true;
    if (put.outcome === "lost") return false;
    // Unknown: the record says whether this very one landed (its nonce).
    const got = await this.read(bucket, record.id);
    if (got?.record.nonce === record.nonce) return true;
    if (got) return false;
    throw new DomainError(
      "ServiceUnavailable",
      `the store did not answer the creation of transaction ${record.id}; please retry`,
      { retryAfterSeconds: 1 },
      { cause: put.error },
    );
  }

  async read(bucket: string, id: string): Promise<TxRead | null> {
    const cached = this.final.get(`${bucket}\n${id}`);
    if (cached) return cached;
    const got = await this.getText(bucket, this.name(id));
    if (!got) return null;
    const record = parseTxRecord(got.text, `${bucket}/${this.name(id)}`);
    const read = { record, version: got.etag };
    if (record.state !== "open") this.final.set(`${bucket}\n${id}`, read);
    return read;
  }

  async swap(bucket: string, from: TxRead, next: TxRecord): Promise<SwapAnswer> {
    const put = await this.put(bucket, this.name(next.id), encode(next), { ifMatch: from.version });
    if (put.outcome === "written") {
      if (next.state !== "open" && put.etag) {
        this.final.set(`${bucket}\n${next.id}`, { record: next, version: put.etag });
      }
      return { outcome: "swapped" };
    }
    if (put.outcome === "lost") return { outcome: "lost" };
    return { outcome: "unknown", error: put.error };
  }
}

const encode = (record: TxRecord): Buffer => Buffer.from(JSON.stringify(record));

function parseTxRecord(text: string, where: string): TxRecord {
  let value: Partial<TxRecord> | null = null;
  try {
    value = JSON.parse(text) as Partial<TxRecord>;
  } catch {
    value = null;
  }
  const ok =
    value !== null &&
    typeof value === "object" &&
    value.v === 1 &&
    typeof value.id === "string" &&
    typeof value.leaseId === "string" &&
    Number.isSafeInteger(value.token) &&
    typeof value.bucket === "string" &&
    (value.state === "open" || value.state === "committed" || value.state === "aborted") &&
    Array.isArray(value.keys) &&
    typeof value.nonce === "string";
  if (!ok) throw new Error(`${where} is not a fencegate transaction record`);
  return value as TxRecord;
}
