import { randomBytes } from "node:crypto";
import type { BlockBlobClient } from "@azure/storage-blob";
import { isLostRace } from "./azure-errors.js";
import type { AzureStore } from "./azure-store.js";

export type AzureCapabilityReport = { ok: boolean; findings: string[] };

type Conditions = { ifMatch?: string; ifNoneMatch?: string };

/**
 * Whether the account honours the conditions every commit of this backend relies on: If-None-Match: *
 * and If-Match on Put Blob, on Put Block List and on Set Blob Metadata, each refused with 412 (or
 * 409 BlobAlreadyExists) when it does not hold. Azure does; an emulator or a proxy in front of it
 * may not. The probe blob goes under `<meta>p/` in `bucket` and is removed afterwards. A finding is
 * a short sentence: "ignores If-Match on Put Block List". Store failures (a missing container,
 * bad credentials) are thrown.
 */
export async function verifyAzureConditionalWrites(
  store: AzureStore,
  bucket: string,
): Promise<AzureCapabilityReport> {
  const findings: string[] = [];
  const blob = await store.blob(bucket, `${store.opts.metaPrefix}p/${randomBytes(8).toString("hex")}`);
  const stale = '"0x8DEADBEEF000000"';
  const attempt = async (what: string, fn: (abortSignal: AbortSignal) => Promise<{ etag?: string }>) =>
    store.calls.run(`probe ${what} in ${bucket}`, undefined, fn, isLostRace).then(
      (r) => ({ written: true as const, etag: r.etag }),
      (e: unknown) => {
        if (isLostRace(e)) return { written: false as const };
        throw e;
      },
    );
  const put = (body: string, conditions: Conditions) =>
    attempt("Put Blob", (abortSignal) =>
      blob.upload(Buffer.from(body), body.length, { conditions, abortSignal }),
    );
  const blockList = (conditions: Conditions) =>
    attempt("Put Block List", (a) => commitBlocks(blob, conditions, a));
  const metadata = (conditions: Conditions) =>
    attempt("Set Blob Metadata", (abortSignal) =>
      blob.setMetadata({ probe: "1" }, { conditions, abortSignal }),
    );
  try {
    const created = await put("probe 1", { ifNoneMatch: "*" });
    if (!created.written) findings.push("refuses If-None-Match: * on a new blob on Put Blob");
    if ((await put("probe 2", { ifNoneMatch: "*" })).written)
      findings.push("ignores If-None-Match on Put Blob");
    if ((await put("probe 3", { ifMatch: stale })).written) findings.push("ignores If-Match on Put Blob");
    if ((await blockList({ ifNoneMatch: "*" })).written)
      findings.push("ignores If-None-Match on Put Block List");
    if ((await blockList({ ifMatch: stale })).written) findings.push("ignores If-Match on Put Block List");
    if ((await metadata({ ifMatch: stale })).written) findings.push("ignores If-Match on Set Blob Metadata");
    const current = (
      await store.calls.run("probe properties", undefined, (a) => blob.getProperties({ abortSignal: a }))
    ).etag;
    if (current && !(await blockList({ ifMatch: current })).written) {
      findings.push("refuses a matching If-Match on Put Block List");
    }
  } finally {
    await store.calls
      .run(`remove probe in ${bucket}`, undefined, (abortSignal) => blob.deleteIfExists({ abortSignal }))
      .catch(() => undefined);
  }
  return { ok: findings.length === 0, findings };
}

async function commitBlocks(blob: BlockBlobClient, conditions: Conditions, abortSignal: AbortSignal) {
  const id = Buffer.from(randomBytes(6).toString("hex")).toString("base64");
  await blob.stageBlock(id, Buffer.from("block"), 5, { abortSignal });
  return blob.commitBlockList([id], { conditions, abortSignal });
}
