import { DomainError } from "../../core/errors.js";
import type { SystemRecords } from "../storage-backend.js";
import type { S3Context } from "./context.js";

/**
 * fencegate's own records in a system bucket of the S3 store: `<m><name>`, each created once with
 * PutObject If-None-Match: * (the store honours it: the capability gate checks that bucket before
 * the first create). S3 answers a PUT only once the object is stored durably. The gateway reserves
 * the bucket's name, and keys under `<m>` are refused in every bucket, so no S3 request reaches
 * these objects.
 */
export function s3SystemRecords(ctx: S3Context, bucket: string): SystemRecords {
  const meta = ctx.layout.meta;
  const where = `bucket ${bucket} of the S3 store at ${ctx.store.endpoint}`;
  const names = async (prefix: string, strip: number): Promise<string[]> => {
    const found: string[] = [];
    for await (const page of ctx.store.listAll(bucket, prefix)) {
      for (const o of page.objects) found.push(o.name.slice(strip));
    }
    return found;
  };
  return {
    where,
    async open() {
      let state = await ctx.store.bucketState(bucket);
      if (state === "missing") {
        // False when another replica created it meanwhile (or another account owns the name).
        await ctx.store.createBucket(bucket);
        state = await ctx.store.bucketState(bucket);
      }
      if (state !== "ours") {
        throw new DomainError(
          "AccessDenied",
          "the bucket belongs to another account, or these credentials may not use it",
          { bucket },
        );
      }
      await ctx.store.list(bucket, { prefix: meta, maxKeys: 1 });
    },
    async create(name, body) {
      await ctx.gate.require(bucket);
      const put = await ctx.store.putConditional(bucket, meta + name, {
        body,
        ifNoneMatch: "*",
        contentType: "application/json",
      });
      if (put.outcome === "written") return true;
      if (put.outcome === "condition-failed") return false;
      throw new DomainError(
        "ServiceUnavailable",
        `no answer came from ${where} to the creation of ${meta}${name}; it may have been created`,
        {},
        { cause: put.error },
      );
    },
    list: (prefix) => names(meta + prefix, meta.length),
    // Older versions wrote epochs as gateway objects: a record `<m>r/<key>` each, which a delete
    // turns into a tombstone that stays.
    legacyKeys: (prefix) => names(ctx.layout.records + prefix, ctx.layout.records.length),
  };
}
