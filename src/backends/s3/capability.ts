import { randomBytes } from "node:crypto";
import { DomainError } from "../../core/errors.js";
import type { Logger } from "../../core/log.js";
import type { Layout } from "./layout.js";
import type { ConditionalPut, Store } from "./store.js";

export type CapabilityReport = { ok: boolean; findings: string[] };

/**
 * Whether the store honours the conditional writes every commit relies on: If-None-Match: *
 * and If-Match on PutObject and on CompleteMultipartUpload, each refused with 412 (or 409
 * ConditionalRequestConflict) when it does not hold. Probe objects go under `<m>p/` in `bucket`
 * and are removed afterwards. A finding is a short sentence: "ignores If-None-Match on PutObject".
 */
export async function verifyConditionalWrites(
  store: Store,
  layout: Layout,
  bucket: string,
): Promise<CapabilityReport> {
  const findings: string[] = [];
  const base = `${layout.probes}${randomBytes(8).toString("hex")}`;
  const put = (name: string, conditions: { ifMatch?: string; ifNoneMatch?: string }, body: string) =>
    store.putConditional(bucket, name, { body: Buffer.from(body), ...conditions });
  const names = [`${base}/put`, `${base}/mpu`];
  try {
    // PutObject: create, then the two conditions that must fail, then one that must pass.
    const created = await put(names[0]!, { ifNoneMatch: "*" }, "probe 1");
    if (created.outcome !== "written") findings.push("refuses If-None-Match: * on a new key on PutObject");
    if ((await put(names[0]!, { ifNoneMatch: "*" }, "probe 2")).outcome === "written") {
      findings.push("ignores If-None-Match on PutObject");
    }
    const current = await store.head(bucket, names[0]!);
    if ((await put(names[0]!, { ifMatch: `"${"0".repeat(32)}"` }, "probe 3")).outcome === "written") {
      findings.push("ignores If-Match on PutObject");
    }
    const fresh = await store.head(bucket, names[0]!);
    if (
      current &&
      fresh &&
      (await put(names[0]!, { ifMatch: fresh.etag }, "probe 4")).outcome !== "written"
    ) {
      findings.push("refuses a matching If-Match on PutObject");
    }

    // CompleteMultipartUpload over an existing object; each attempt with an upload of its own, since
    // some stores cannot complete an upload twice.
    await store.put(bucket, names[1]!, { body: Buffer.from("existing") });
    const complete = async (conditions: {
      ifMatch?: string;
      ifNoneMatch?: string;
    }): Promise<ConditionalPut> => {
      const uploadId = await store.createMultipart(bucket, names[1]!, {});
      try {
        const etag = await store.uploadPart(bucket, names[1]!, uploadId, 1, Buffer.from("part"));
        return await store.completeConditional(
          bucket,
          names[1]!,
          uploadId,
          [{ partNumber: 1, etag }],
          conditions,
        );
      } finally {
        await store.abortMultipart(bucket, names[1]!, uploadId).catch(() => undefined);
      }
    };
    if ((await complete({ ifNoneMatch: "*" })).outcome === "written") {
      findings.push("ignores If-None-Match on CompleteMultipartUpload");
    }
    if ((await complete({ ifMatch: `"${"0".repeat(32)}"` })).outcome === "written") {
      findings.push("ignores If-Match on CompleteMultipartUpload");
    }
  } finally {
    await Promise.all(names.map((name) => store.delete(bucket, name).catch(() => undefined)));
  }
  return { ok: findings.length === 0, findings };
}

/**
 * Runs the check before the first write: once for the whole store against a scratch bucket, or
 * once per bucket. A failed check refuses every write with a one-line reason; a check that could
 * not run (the store unreachable, the bucket missing) is not remembered, and the write fails
 * with that error.
 */
export class CapabilityGate {
  private readonly reports = new Map<string, Promise<CapabilityReport>>();
  private storeWide: Promise<CapabilityReport> | undefined;

  constructor(
    private readonly store: Store,
    private readonly layout: Layout,
    private readonly opts: { verify: boolean; verifyBucket?: string; log?: Logger },
  ) {}

  /** Starts the store-wide check against the scratch bucket (created when missing). */
  start(): void {
    const scratch = this.opts.verifyBucket;
    if (!this.opts.verify || scratch === undefined) return;
    const run = async () => {
      if ((await this.store.bucketState(scratch)) === "missing") await this.store.createBucket(scratch);
      const report = await verifyConditionalWrites(this.store, this.layout, scratch);
      this.logReport(report, scratch);
      return report;
    };
    const started = run();
    started.catch((err) => {
      // Not remembered: the next write tries again.
      if (this.storeWide === started) this.storeWide = undefined;
      this.opts.log?.warn({ err, bucket: scratch }, "s3 backend: the conditional-write check could not run");
    });
    this.storeWide = started;
  }

  async require(bucket: string): Promise<void> {
    if (!this.opts.verify) return;
    if (this.opts.verifyBucket !== undefined && this.storeWide === undefined) this.start();
    const report = await (this.storeWide ?? this.forBucket(bucket));
    if (!report.ok) {
      throw new DomainError(
        "ServiceUnavailable",
        `the store at ${this.store.endpoint} ${report.findings[0]}: fencegate cannot commit atomically there`,
        { findings: report.findings },
      );
    }
  }

  private forBucket(bucket: string): Promise<CapabilityReport> {
    let report = this.reports.get(bucket);
    if (!report) {
      const started = verifyConditionalWrites(this.store, this.layout, bucket).then((r) => {
        this.logReport(r, bucket);
        return r;
      });
      started.catch(() => {
        if (this.reports.get(bucket) === started) this.reports.delete(bucket);
      });
      this.reports.set(bucket, started);
      report = started;
    }
    return report;
  }

  private logReport(report: CapabilityReport, bucket: string): void {
    if (!report.ok) {
      this.opts.log?.error(
        { bucket, findings: report.findings, store: this.store.endpoint },
        "s3 backend: the store does not honour conditional writes; every write is refused",
      );
    }
  }
}
