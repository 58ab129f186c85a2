import { writeFileSync } from "node:fs";
import { request as httpRequest } from "node:http";
import { join } from "node:path";
import { expect } from "vitest";
import { LeaseClient } from "../../src/client/lease-client.js";
import { startTestGateway, type TestGateway, tempDir } from "../support/gateway.js";
import {
  type Credentials,
  expectS3Error,
  objectPath,
  type RawResponse,
  type SignedRequest,
  signedRequest,
  signRequest,
} from "../support/signed-http.js";

/**
 * Three principals on one gateway, configured through the YAML file as a team would: the root
 * credential (an administrator, from the environment), a writer limited to `shared/team-a/`
 * with read, write and lease, and a reader with read on the whole `shared` bucket only.
 */
export const ROOT: Credentials = { accessKeyId: "root-key", secretAccessKey: "root-secret-key" };
export const WRITER: Credentials = { accessKeyId: "writer-key", secretAccessKey: "writer-secret-key" };
export const READER: Credentials = { accessKeyId: "reader-key", secretAccessKey: "reader-secret-key" };

export const SHARED = "shared";
export const PRIVATE = "private";

const CONFIG_YAML = `
credentials:
  - accessKeyId: ${WRITER.accessKeyId}
    secretAccessKey: ${WRITER.secretAccessKey}
    allow:
      - { bucket: ${SHARED}, prefix: team-a/, actions: [read, write, lease] }
  - accessKeyId: ${READER.accessKeyId}
    secretAccessKey: ${READER.secretAccessKey}
    allow:
      - { bucket: ${SHARED}, actions: [read] }
# Writes without a token are accepted, so that what refuses a request here is the access check.
fencing:
  default: optional
`;

export type AccessGateway = { gw: TestGateway; admin: LeaseClient; stop(): Promise<void> };

/** The gateway, with both buckets and a seed object under each part of them, written by root. */
export async function startAccessGateway(): Promise<AccessGateway> {
  const dir = tempDir();
  const configFile = join(dir.path, "fencegate.yaml");
  writeFileSync(configFile, CONFIG_YAML);
  const gw = await startTestGateway({
    env: {
      FENCEGATE_CONFIG: configFile,
      FENCEGATE_ACCESS_KEY_ID: ROOT.accessKeyId,
      FENCEGATE_SECRET_ACCESS_KEY: ROOT.secretAccessKey,
    },
  });
  const admin = new LeaseClient({ endpoint: gw.url, ...ROOT });
  for (const b of [SHARED, PRIVATE])
    expect((await as(gw, ROOT, { method: "PUT", path: `/${b}` })).status).toBe(200);
  for (const [b, k] of [
    [SHARED, "team-a/seed.txt"],
    [SHARED, "team-b/seed.txt"],
    [PRIVATE, "secret.txt"],
  ] as const) {
    expect((await as(gw, ROOT, { method: "PUT", path: objectPath(b, k), body: `seed of ${k}` })).status).toBe(
      200,
    );
  }
  return {
    gw,
    admin,
    async stop() {
      await gw.stop();
      dir.cleanup();
    },
  };
}

/** A request signed by `who`. */
export function as(gw: TestGateway, who: Credentials, req: Omit<SignedRequest, "credentials">) {
  return signedRequest(gw.url, { ...req, credentials: who });
}

/**
 * The answer is S3's AccessDenied (403, "Access Denied", no fencing detail such as the object's
 * highest token), and the audit log holds the refusal: its op, rejected, AccessDenied, the principal.
 */
export async function expectDenied(
  env: AccessGateway,
  res: RawResponse,
  expected: { op: string; who: Credentials; method?: string; bucket?: string; key?: string | null },
): Promise<void> {
  if (expected.method === "HEAD") {
    expect(res.status).toBe(403);
    expect(res.headers["x-amz-error-code"]).toBe("AccessDenied");
  } else {
    const err = expectS3Error(res, "AccessDenied", 403);
    expect(err.Message).toBe("Access Denied");
    expect(err).not.toHaveProperty("HighestToken");
  }
  expect(res.headers["x-fence-highest-token"]).toBeUndefined();
  const record = await auditRecordOf(env, res, expected.op);
  expect(record, `no audit record of the refused ${expected.op}`).toBeDefined();
  expect(record).toMatchObject({
    op: expected.op,
    decision: "rejected",
    reason: "AccessDenied",
    principal: expected.who.accessKeyId,
    ...(expected.bucket !== undefined ? { bucket: expected.bucket } : {}),
    ...(expected.key !== undefined ? { key: expected.key } : {}),
  });
}

/** The audit record of the request that got this answer, by its request id. */
export async function auditRecordOf(
  env: AccessGateway,
  res: RawResponse,
  op: string,
): Promise<Record<string, unknown> | undefined> {
  const requestId = res.headers["x-amz-request-id"];
  const page = await env.admin.audit({ op, limit: "1000" });
  return (page.records as Array<Record<string, unknown>>).find((r) => r.requestId === requestId);
}

/**
 * Sends the headers with Expect: 100-continue and the body only if the gateway asks for it;
 * `continued` tells whether it did.
 */
export async function expectContinue(
  gw: TestGateway,
  who: Credentials,
  req: Omit<SignedRequest, "credentials"> & { body: string },
): Promise<{ status: number; continued: boolean; text: string }> {
  const signed = await signRequest(gw.url, {
    ...req,
    credentials: who,
    headers: { ...req.headers, expect: "100-continue" },
  });
  const url = new URL(gw.url);
  return new Promise((resolve, reject) => {
    let continued = false;
    const r = httpRequest(
      {
        host: url.hostname,
        port: Number(url.port),
        method: req.method,
        path: signed.path,
        headers: signed.headers,
        agent: false,
      },
      (res) => {
        let text = "";
        res.on("data", (d) => {
          text += d;
        });
        res.on("end", () => resolve({ status: res.statusCode ?? 0, continued, text }));
      },
    );
    r.on("continue", () => {
      continued = true;
      r.end(req.body);
    });
    r.on("error", reject);
    r.flushHeaders();
  });
}
