import { DomainError } from "../../core/errors.js";
import { noSuchBucket } from "../backend-errors.js";
import { type RecordCondition, type RecordPut, TransactionRecords } from "../transaction-records.js";
import { azureStatus, isContainerNotFound, isLostRace } from "./azure-errors.js";
import type { AzureStore } from "./azure-store.js";

/**
 * The records of fenced transactions in a container: the blob `<meta>t/<id>`
 * (backends/transaction-records.ts). Azure changes a blob's ETag on every write, so If-Match is
 * a true compare-and-swap (the record's nonce is kept all the same).
 */
export class AzureTransactionRecords extends TransactionRecords {
  constructor(private readonly store: AzureStore) {
    super();
  }

  protected name(id: string): string {
    return `${this.store.opts.metaPrefix}t/${id}`;
  }

  /** One conditional Put Blob of the record; the SDK never retries it (blobOnce). */
  protected async put(
    bucket: string,
    name: string,
    body: Buffer,
    conditions: RecordCondition,
  ): Promise<RecordPut> {
    const blob = await this.store.blobOnce(bucket, name);
    try {
      const answer = await this.store.calls.run(
        `write transaction ${name.slice(name.lastIndexOf("/") + 1)}`,
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

  protected async getText(bucket: string, name: string): Promise<{ text: string; etag: string } | null> {
    const blob = await this.store.blob(bucket, name);
    try {
      return await this.store.calls.run(
        `read transaction ${name.slice(name.lastIndexOf("/") + 1)}`,
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
  }
}
