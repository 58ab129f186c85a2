import type { Clock } from "../../core/clock.js";
import type { Logger } from "../../core/log.js";
import type { CallObserver } from "../../metrics/observe.js";

/** The steps of a commit at which `hooks` is called (tests interleave commits there). */
export type S3CommitStep =
  /** The new blob is stored (and its body verified); nothing is committed yet. */
  | "blob-stored"
  /** The record (and the plain object, when needed) was read; the HCT rule is next. */
  | "record-read"
  /** The HCT rule and the conditions passed; the conditional record PUT is next. */
  | "before-record-put"
  /** The conditional record PUT succeeded: the commit is done. */
  | "after-record-put";

export type S3CommitHookInfo = {
  op: "put" | "complete" | "delete" | "raise";
  bucket: string;
  key: string;
  /** 1 for the first pass of the compare-and-swap loop, then 2, 3... after a lost race. */
  attempt: number;
};

/** Test-only pause points: awaited at each step of a commit. */
export type S3CommitHooks = (step: S3CommitStep, info: S3CommitHookInfo) => Promise<void>;

export type S3BackendOptions = {
  /** Empty or absent: Amazon S3 (the SDK resolves the endpoint from the region). */
  endpoint?: string;
  region: string;
  /** Absent: the SDK's default credential chain (environment, profile, instance role...). */
  credentials?: { accessKeyId: string; secretAccessKey: string; sessionToken?: string };
  forcePathStyle?: boolean;
  /** Each store request's time limit (connection, headers, idle body). Default 30 s. */
  requestTimeoutMs?: number;
  /** fencegate's own namespace inside every store bucket. Default `.fencegate/`. */
  metaPrefix?: string;
  /** Bodies are uploaded in parts of this size (at least 5 MiB, S3's minimum). Default 8 MiB. */
  partSizeBytes?: number;
  /** Unreferenced blobs younger than this are left alone by collectGarbage. Default 1 h. */
  gcGraceMs?: number;
  /** How often collectGarbage runs over every store bucket. Default 0: never (call it yourself). */
  gcIntervalMs?: number;
  /** Multipart uploads initiated longer ago than this are aborted by sweepAbandoned(). Default 24 h. */
  multipartMaxAgeMs?: number;
  /**
   * Check that the store honours If-None-Match / If-Match before the first write (default true).
   * With `verifyBucket`, once at start-up against that scratch bucket (created when missing) for
   * the whole store; otherwise lazily, once per bucket, on its first write. A store that ignores
   * them gets every write refused with ServiceUnavailable.
   */
  verify?: boolean;
  verifyBucket?: string;
  /** Stamps lastModified and upload initiation times. */
  clock?: Clock;
  hooks?: S3CommitHooks;
  log?: Logger;
  /** Told of every store call (operation, outcome, latency): metrics. */
  observeCall?: CallObserver;
};

const MiB = 1024 * 1024;

/** S3's limits: 5 MiB minimum part, 5 GiB maximum part and single PUT. */
export const MIN_BLOB_PART = 5 * MiB;
export const MAX_BLOB_PART = 5 * 1024 * MiB;

export const DEFAULTS = {
  requestTimeoutMs: 30_000,
  metaPrefix: ".fencegate/",
  partSizeBytes: 8 * MiB,
  gcGraceMs: 60 * 60 * 1000,
  multipartMaxAgeMs: 24 * 60 * 60 * 1000,
} as const;

/** The options with their defaults applied. */
export type ResolvedOptions = {
  partSizeBytes: number;
  gcGraceMs: number;
  gcIntervalMs: number;
  multipartMaxAgeMs: number;
  verifyBucket?: string;
};
