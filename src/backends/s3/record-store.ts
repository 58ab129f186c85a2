import type { Logger } from "../../core/log.js";
import type { EtagCache } from "./etag-cache.js";
import type { Layout } from "./layout.js";
import { type ObjectRecord, parseRecord, type ReadRecord, serializeRecord } from "./records.js";
import type { Store } from "./store.js";

/**
 * Records in the store: reading them (through the ETag cache where a listing already knows the
 * ETag) and replacing them by compare-and-swap.
 */
export class RecordStore {
  constructor(
    private readonly store: Store,
    private readonly layout: Layout,
    private readonly cache: EtagCache<ObjectRecord>,
    private readonly log?: Logger,
  ) {}

  /** The key's record and its ETag; null when there is none. NoSuchBucket. */
  async read(bucket: string, key: string, signal?: AbortSignal): Promise<ReadRecord | null> {
    const name = this.layout.recordName(key);
    const got = await this.store.getText(bucket, name, signal);
    if (!got) return null;
    const cached = this.cache.get(bucket, name, got.etag);
    if (cached) return { record: cached, etag: got.etag };
    const record = parseRecord(got.text, `${bucket}/${name}`);
    if (record.key !== key) throw new Error(`${bucket}/${name} is the record of another key`);
    this.cache.set(bucket, name, got.etag, record);
    return { record, etag: got.etag };
  }

  /**
   * The record a listing saw as `name` with `etag`: from the cache, or read again. Null when it
   * is gone by now. The record read may be newer than the listed one; either is a fine answer.
   */
  async readListed(bucket: string, name: string, etag: string): Promise<ObjectRecord | null> {
    const cached = this.cache.get(bucket, name, etag);
    if (cached) return cached;
    const got = await this.store.getText(bucket, name);
    if (!got) return null;
    const record = parseRecord(got.text, `${bucket}/${name}`);
    this.cache.set(bucket, name, got.etag, record);
    return record;
  }

  /**
   * Replaces `current` (null: creates) with `next`, only if the record is still `current`:
   * If-Match on its ETag, or If-None-Match: * to create. "lost" when another write came first.
   *
   * Each PUT is sent once by the SDK. When its outcome is unknown (a timeout, a reset, a 5xx),
   * the record is read again: our nonce there means it committed. If the record is still
   * `current`, the same conditional PUT is sent again (at most one copy can land: both are
   * conditional on `current`), which settles a request lost on a stale connection. Anything
   * else leaves the outcome unknown, since our PUT may still land, or may have landed and been
   * replaced since: that is thrown as UnknownOutcomeError (not a DomainError), so that the
   * fencing core keeps the commit intent and a later lease grant fences the key.
   */
  async swap(bucket: string, current: ReadRecord | null, next: ObjectRecord): Promise<"written" | "lost"> {
    const name = this.layout.recordName(next.key);
    let uncertain: unknown;
    for (let attempt = 1; attempt <= SEND_ATTEMPTS; attempt++) {
      let put: Awaited<ReturnType<Store["putConditional"]>>;
      try {
        put = await this.store.putConditional(bucket, name, {
          body: serializeRecord(next),
          contentType: "application/json",
          ...(current ? { ifMatch: current.etag } : { ifNoneMatch: "*" }),
        });
      } catch (e) {
        // Certainly not applied; but an earlier copy might have been.
        if (uncertain === undefined) throw e;
        put = { outcome: "unknown", error: e };
      }
      if (put.outcome === "written") {
        this.cache.set(bucket, name, put.etag, next);
        return "written";
      }
      if (put.outcome === "condition-failed" && uncertain === undefined) return "lost";
      if (put.outcome === "unknown") uncertain = put.error;
      const reread = await this.reread(bucket, next.key);
      if (reread !== undefined && reread?.record.nonce === next.nonce) return "written";
      const unchanged =
        reread !== undefined && (reread === null ? current === null : reread.etag === current?.etag);
      if (put.outcome === "condition-failed" || !unchanged) break;
    }
    throw new UnknownOutcomeError(
      `the outcome of the commit of ${bucket}/${next.key} is unknown: the store did not answer the conditional write (${describe(uncertain)})`,
      { cause: uncertain },
    );
  }

  /** The record again, or undefined when even that fails. */
  private async reread(bucket: string, key: string): Promise<ReadRecord | null | undefined> {
    try {
      return await this.read(bucket, key);
    } catch (e) {
      this.log?.warn({ bucket, key, err: e }, "s3 backend: re-reading a record failed");
      return undefined;
    }
  }
}

/** Sends of one conditional record PUT while its outcome stays unknown and the record unchanged. */
const SEND_ATTEMPTS = 3;

/**
 * A commit that may or may not have landed. Deliberately not a DomainError: the fencing core
 * then keeps the commit intent, and the next lease grant on the key fences it.
 */
export class UnknownOutcomeError extends Error {
  override name = "UnknownOutcomeError";
}

const describe = (e: unknown) => (e instanceof Error ? `${e.name}: ${e.message}` : String(e));
