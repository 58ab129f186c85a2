import { HeadObjectCommand, PutObjectCommand, type S3Client } from "@aws-sdk/client-s3";
import { StaleTokenError } from "../../../src/core/errors.js";

/**
 * A DELIBERATELY BROKEN design, kept only to show what the record design prevents: the bytes
 * live at the key itself, the HCT in the object's user metadata, and the commit is a PutObject
 * with If-Match on the data object's ETag as read. S3's ETag is the MD5 of the bytes, so a
 * writer that read ETag E and paused can find E again after newer writes put the same bytes
 * back (with other metadata, or after other bytes in between): its If-Match passes and it
 * overwrites a newer commit, lowering the HCT (ABA).
 */
export class NaiveEtagFencing {
  constructor(
    private readonly raw: S3Client,
    private readonly bucket: string,
    /** Called after the read, before the conditional PUT (the pause point of the ABA test). */
    private readonly beforePut: (token: number) => Promise<void> = async () => {},
  ) {}

  async put(key: string, bytes: Buffer, token: number, userMetadata: Record<string, string> = {}) {
    let etag: string | undefined;
    let hct: number | null = null;
    try {
      const head = await this.raw.send(new HeadObjectCommand({ Bucket: this.bucket, Key: key }));
      etag = head.ETag;
      hct = head.Metadata?.hct !== undefined ? Number(head.Metadata.hct) : null;
    } catch (e) {
      if ((e as Error).name !== "NotFound") throw e;
    }
    if (hct !== null && token < hct) throw new StaleTokenError(token, hct);
    await this.beforePut(token);
    await this.raw.send(
      new PutObjectCommand({
        Bucket: this.bucket,
        Key: key,
        Body: bytes,
        ContentLength: bytes.length,
        Metadata: { ...userMetadata, hct: String(Math.max(token, hct ?? token)) },
        ...(etag ? { IfMatch: etag } : { IfNoneMatch: "*" }),
      }),
    );
  }

  async state(key: string) {
    const head = await this.raw.send(new HeadObjectCommand({ Bucket: this.bucket, Key: key }));
    return { hct: Number(head.Metadata?.hct), etag: head.ETag, metadata: head.Metadata };
  }
}
