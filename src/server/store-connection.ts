import type { AzureBackendOptions } from "../backends/azure/azure-options.js";
import type { S3BackendOptions } from "../backends/s3/options.js";
import type { BackendSpec } from "../config/schema.js";

/**
 * How a configured backend reaches its store: where it is, its credentials and its names, as the
 * gateway and `fencegate backend verify` both open it. What else a backend takes (clocks, logs,
 * sweeps, metrics) is each caller's.
 */
export function s3Connection(spec: Extract<BackendSpec, { type: "s3" }>) {
  return {
    ...(spec.endpoint ? { endpoint: spec.endpoint } : {}),
    region: spec.region,
    ...(spec.accessKeyId && spec.secretAccessKey
      ? { credentials: { accessKeyId: spec.accessKeyId, secretAccessKey: spec.secretAccessKey } }
      : {}),
    forcePathStyle: spec.forcePathStyle,
    requestTimeoutMs: spec.requestTimeoutMs,
    ...(spec.metaPrefix ? { metaPrefix: spec.metaPrefix } : {}),
  } satisfies Partial<S3BackendOptions>;
}

export function azureConnection(spec: Extract<BackendSpec, { type: "azure" }>) {
  return {
    ...(spec.connectionString ? { connectionString: spec.connectionString } : {}),
    ...(spec.accountUrl ? { accountUrl: spec.accountUrl } : {}),
    ...(spec.accountName ? { accountName: spec.accountName } : {}),
    ...(spec.accountKey ? { accountKey: spec.accountKey } : {}),
    ...(spec.sasToken ? { sasToken: spec.sasToken } : {}),
    ...(spec.defaultCredential ? { defaultCredential: true } : {}),
    requestTimeoutMs: spec.requestTimeoutMs,
    ...(spec.metaPrefix ? { metaPrefix: spec.metaPrefix } : {}),
  } satisfies Partial<AzureBackendOptions>;
}
