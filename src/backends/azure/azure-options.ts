import {
  AnonymousCredential,
  BlobServiceClient,
  type StoragePipelineOptions,
  StorageSharedKeyCredential,
} from "@azure/storage-blob";
import type { Clock } from "../../core/clock.js";
import type { Logger } from "../../core/log.js";
import { VERSION } from "../../core/version.js";
import type { CallObserver } from "../../metrics/observe.js";

/** Where a test may pause a write: each step of the path to its conditional commit. */
export type AzureHookStep =
  /** The body is buffered (small) or staged as blocks (large); multipart: the parts are staged. */
  | "body-staged"
  /** The blob's properties (its ETag and fencegate state) were read for a commit attempt. */
  | "properties-read"
  /** The HCT rule and the conditions passed; the conditional call is next. */
  | "before-commit"
  /** The conditional call succeeded. */
  | "after-commit";

export type AzureHookContext = {
  op: "put" | "delete" | "raise" | "complete";
  bucket: string;
  key: string;
};

/** Test-only pause points; a hook that throws fails the write at that step. */
export type AzureHooks = (step: AzureHookStep, at: AzureHookContext) => Promise<void> | void;

export type AzureBackendOptions = {
  /** An Azure Storage connection string (Azurite's, or an account's with AccountKey or SAS). */
  connectionString?: string;
  /** The blob endpoint, `https://<account>.blob.core.windows.net`, when no connection string is given. */
  accountUrl?: string;
  /** With accountKey: shared key auth. Default: the first label of accountUrl's host. */
  accountName?: string;
  accountKey?: string;
  /** A SAS token (with or without the leading `?`) for accountUrl. */
  sasToken?: string;
  /** Microsoft Entra ID through @azure/identity's DefaultAzureCredential (install that package). */
  defaultCredential?: boolean;

  /** Deadline of every call to Azure (across the SDK's retries). Default 30 s. */
  requestTimeoutMs?: number;
  /**
   * Bodies up to this size are buffered and written with one Put Blob; larger or longer ones are
   * staged in blocks of this size. Default 4 MiB (Azure allows up to 4000 MiB per block).
   */
  blockSizeBytes?: number;
  /** Blob name prefix of fencegate's own blobs in every container (multipart uploads). Default `.fencegate/`. */
  metaPrefix?: string;
  /** Multipart uploads initiated longer ago than this are aborted by sweepAbandoned(). Default 24 h. */
  multipartMaxAgeMs?: number;
  /** How often the backend runs that sweep. Default 10 minutes; 0 runs none. */
  multipartSweepIntervalMs?: number;
  /**
   * Whether the account has a hierarchical namespace (ADLS Gen2); then keys with empty path
   * segments or a trailing `/` are refused. Default: asked from the account (Get Account Info).
   */
  hierarchicalNamespace?: boolean;
  /** Compare-and-swap attempts of one commit before it gives up with SlowDown. Default 25. */
  maxCommitAttempts?: number;
  clock?: Clock;
  hooks?: AzureHooks;
  log?: Logger;
  /** Told of every call to Azure (its operation, outcome and latency): metrics. */
  observeCall?: CallObserver;
};

export type ResolvedAzureOptions = Required<
  Pick<
    AzureBackendOptions,
    | "requestTimeoutMs"
    | "blockSizeBytes"
    | "metaPrefix"
    | "multipartMaxAgeMs"
    | "multipartSweepIntervalMs"
    | "maxCommitAttempts"
    | "clock"
  >
> &
  Pick<AzureBackendOptions, "hooks" | "log" | "hierarchicalNamespace" | "observeCall">;

const MIB = 1024 * 1024;
/** Azure's limit for one staged block (service version 2019-12-12 and later). */
export const MAX_BLOCK_BYTES = 4000 * MIB;

export function resolveOptions(options: AzureBackendOptions): ResolvedAzureOptions {
  const sources = [options.connectionString, options.accountUrl].filter((v) => v !== undefined);
  if (sources.length !== 1) {
    throw new Error("the azure backend needs exactly one of connectionString and accountUrl");
  }
  const blockSizeBytes = options.blockSizeBytes ?? 4 * MIB;
  if (!Number.isSafeInteger(blockSizeBytes) || blockSizeBytes < 1 || blockSizeBytes > MAX_BLOCK_BYTES) {
    throw new Error(`blockSizeBytes must be an integer from 1 to ${MAX_BLOCK_BYTES}`);
  }
  const metaPrefix = options.metaPrefix ?? ".fencegate/";
  if (!/^[A-Za-z0-9._-]+\/$/.test(metaPrefix) || metaPrefix === "./" || metaPrefix === "../") {
    throw new Error(
      "metaPrefix must be one path segment of letters, digits, '.', '_' or '-', ending with '/'",
    );
  }
  const requestTimeoutMs = options.requestTimeoutMs ?? 30_000;
  if (!(requestTimeoutMs > 0)) throw new Error("requestTimeoutMs must be positive");
  return {
    requestTimeoutMs,
    blockSizeBytes,
    metaPrefix,
    multipartMaxAgeMs: options.multipartMaxAgeMs ?? 24 * 60 * 60 * 1000,
    multipartSweepIntervalMs: options.multipartSweepIntervalMs ?? 10 * 60 * 1000,
    maxCommitAttempts: options.maxCommitAttempts ?? 25,
    clock: options.clock ?? Date.now,
    ...(options.hooks ? { hooks: options.hooks } : {}),
    ...(options.log ? { log: options.log } : {}),
    ...(options.observeCall ? { observeCall: options.observeCall } : {}),
    ...(options.hierarchicalNamespace !== undefined
      ? { hierarchicalNamespace: options.hierarchicalNamespace }
      : {}),
  };
}

/**
 * The SDK retries transient failures (network errors, 500, 503) a few times, quickly, inside our
 * own deadline: an unreachable endpoint fails within a second. Reads and staged blocks under fixed
 * ids are safe to repeat.
 */
const PIPELINE: StoragePipelineOptions = {
  retryOptions: { maxTries: 3, retryDelayInMs: 100, maxRetryDelayInMs: 800 },
  userAgentOptions: { userAgentPrefix: `fencegate/${VERSION}` },
};

/**
 * Conditional writes (commits, the bucket's marker) are sent once: a retry by the SDK after a lost
 * answer would be refused with 412 (the first attempt changed the ETag) and taken for a lost race,
 * although the write landed. The commit driver reads the state again itself.
 */
const ONCE: StoragePipelineOptions = {
  retryOptions: { maxTries: 1 },
  userAgentOptions: { userAgentPrefix: `fencegate/${VERSION}` },
};

export type AzureClient = {
  service: BlobServiceClient;
  /** The same account, for conditional writes: no retry inside the SDK (ONCE). */
  once: BlobServiceClient;
  /** Present with shared key auth: can sign SAS URLs (the source of Stage Block From URL). */
  sharedKey?: StorageSharedKeyCredential;
  /** Present with a SAS token: appended to source URLs. */
  sasToken?: string;
};

export async function createClient(options: AzureBackendOptions): Promise<AzureClient> {
  if (options.connectionString !== undefined) {
    const connectionString = options.connectionString;
    const service = BlobServiceClient.fromConnectionString(connectionString, PIPELINE);
    const once = BlobServiceClient.fromConnectionString(connectionString, ONCE);
    const credential = service.credential;
    const sas = /(?:^|;)SharedAccessSignature=([^;]+)/i.exec(connectionString)?.[1];
    return {
      service,
      once,
      ...(credential instanceof StorageSharedKeyCredential ? { sharedKey: credential } : {}),
      ...(sas ? { sasToken: sas } : {}),
    };
  }
  const accountUrl = options.accountUrl!.replace(/\/+$/, "");
  if (options.accountKey !== undefined) {
    const accountName = options.accountName ?? new URL(accountUrl).hostname.split(".")[0]!;
    const sharedKey = new StorageSharedKeyCredential(accountName, options.accountKey);
    return {
      service: new BlobServiceClient(accountUrl, sharedKey, PIPELINE),
      once: new BlobServiceClient(accountUrl, sharedKey, ONCE),
      sharedKey,
    };
  }
  if (options.sasToken !== undefined) {
    const sasToken = options.sasToken.replace(/^\?/, "");
    const url = `${accountUrl}?${sasToken}`;
    return {
      service: new BlobServiceClient(url, new AnonymousCredential(), PIPELINE),
      once: new BlobServiceClient(url, new AnonymousCredential(), ONCE),
      sasToken,
    };
  }
  if (options.defaultCredential) {
    const credential = await loadDefaultCredential();
    return {
      service: new BlobServiceClient(accountUrl, credential, PIPELINE),
      once: new BlobServiceClient(accountUrl, credential, ONCE),
    };
  }
  throw new Error("the azure backend needs credentials: accountKey, sasToken or defaultCredential");
}

/** What @azure/core-auth calls a TokenCredential (named here so that no import needs that package). */
type TokenCredentialLike = {
  getToken(
    scopes: string | string[],
    options?: object,
  ): Promise<{ token: string; expiresOnTimestamp: number } | null>;
};

async function loadDefaultCredential(): Promise<TokenCredentialLike> {
  // Optional dependency: loaded only when asked for, and named through a variable so that the
  // compiler does not require it either.
  const name = "@azure/identity";
  let identity: { DefaultAzureCredential: new () => TokenCredentialLike };
  try {
    identity = (await import(name)) as typeof identity;
  } catch {
    throw new Error("defaultCredential needs the @azure/identity package: npm install @azure/identity");
  }
  return new identity.DefaultAzureCredential();
}
