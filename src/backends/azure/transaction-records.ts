import { DomainError } from "../../core/errors.js";
import { LruMap } from "../../core/lru.js";
import type { SwapAnswer, TransactionLog, TxRead, TxRecord } from "../../fence/commit-port.js";
import { noSuchBucket } from "../backend-errors.js";
import { azureStatus, isContainerNotFound, isLostRace } from "./azure-errors.js";
import type { AzureStore } from "./azure-store.js";

/**
 * The records of fenced transactions in a container: the blob `<meta>t/<id>`, JSON (TxRecord),
 * created with Put Blob If-None-Match: * and replaced with Put Blob If-Match on the ETag read.
 * Azure changes a blob's ETag on every write, so If-Match is a true compare-and-swap (the
 * record's nonce is kept all the same). Committed and aborted records are final and cached.
 */
export class AzureTransactionRecords {
  private readonly final = new LruMap<TxRead>(10_000);

  constructor(private readonly store: AzureStore) {}

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

  private name(id: string): string {
    return `${this.store.opts.metaPrefix}t/${id}`;
  }

  /** One conditional Put Blob of the record; the SDK never retries it (blobOnce). */
  private async put(
    bucket: string,
    record: TxRecord,
    conditions: { ifNoneMatch: string } | { ifMatch: string },
  ): Promise<
    | { outcome: "written"; etag: string | undefined }
    | { outcome: "lost" }
    | { outcome: "unknown"; error: unknown }
  > {
    const blob = await this.store.blobOnce(bucket, this.name(record.id));
    const body = Buffer.from(JSON.stringify(record));
    try {
      const answer = await this.store.calls.run(
        `write transaction ${record.id}`,
        undefined,
        (abortSignal) =>
          blob.upload(body, body.length, {
            conditions,
            blobHTTPHeaders: { blobContentType: "application/json" },
            abortSignal,
          }),
        (e) => isLostRace(e) || isContainerNotFound(e),
      );
      return { outcome: "written", etag: answer.etag };
    } catch (e) {
      if (isLostRace(e)) return { outcome: "lost" };
      if (isContainerNotFound(e)) throw noSuchBucket(bucket);
      if (e instanceof DomainError && e.code !== "ServiceUnavailable" && e.code !== "SlowDown") throw e;
      return { outcome: "unknown", error: e };
    }
  }

  async create(bucket: string, record: TxRecord): Promise<boolean> {
    const put = await this.put(bucket, record, { ifNoneMatch: "*" });
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
    const cacheKey = `${bucket}\n${id}`;
    const cached = this.final.get(cacheKey);
    if (cached) return cached;
    const blob = await this.store.blob(bucket, this.name(id));
    let answer: { text: string; etag: string };
    try {
      answer = await this.store.calls.run(
        `read transaction ${id}`,
        undefined,
        async (abortSignal) => {
          // A record is small (a transaction's keys): read whole, with the ETag of that very version.
          const got = await blob.download(0, undefined, { abortSignal });
          const chunks: Buffer[] = [];
          for await (const chunk of got.readableStreamBody ?? []) chunks.push(Buffer.from(chunk as Buffer));
          return { text: Buffer.concat(chunks).toString("utf8"), etag: got.etag ?? "" };
        },
        (e) => azureStatus(e) === 404,
      );
    } catch (e) {
      if (isContainerNotFound(e)) throw noSuchBucket(bucket);
      if (azureStatus(e) === 404) return null;
      throw e;
    }
    const record = parseTxRecord(answer.text, `${bucket}/${this.name(id)}`);
    const read = { record, version: answer.etag };
    if (record.state !== "open") this.final.set(cacheKey, read);
    return read;
  }

  async swap(bucket: string, from: TxRead, next: TxRecord): Promise<SwapAnswer> {
    const put = await this.put(bucket, next, { ifMatch: from.version });
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
