import { type RecordCondition, type RecordPut, TransactionRecords } from "../transaction-records.js";
import type { Layout } from "./layout.js";
import type { Store } from "./store.js";

/** The records of fenced transactions in a store bucket: `<m>t/<id>` (backends/transaction-records.ts). */
export class S3TransactionRecords extends TransactionRecords {
  constructor(
    private readonly store: Store,
    private readonly layout: Layout,
  ) {
    super();
  }

  protected name(id: string): string {
    return `${this.layout.transactions}${id}`;
  }

  protected async put(
    bucket: string,
    name: string,
    body: Buffer,
    conditions: RecordCondition,
  ): Promise<RecordPut> {
    const put = await this.store.putConditional(bucket, name, {
      body,
      contentType: "application/json",
      ...conditions,
    });
    return put.outcome === "condition-failed" ? { outcome: "lost" } : put;
  }

  protected getText(bucket: string, name: string): Promise<{ text: string; etag: string } | null> {
    return this.store.getText(bucket, name);
  }
}
