/**
 * What the console suites share: a gateway with an administrator and two non-administrator keys,
 * and a small client that signs in to the console and keeps its session cookie, as a browser does.
 */
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { expect } from "vitest";
import { startTestGateway, type TestGateway, tempDir } from "../support/gateway.js";
import { type Credentials, objectPath, signedRequest } from "../support/signed-http.js";

export const ROOT: Credentials = { accessKeyId: "root-key", secretAccessKey: "root-secret-key" };
export const WRITER: Credentials = { accessKeyId: "writer-key", secretAccessKey: "writer-secret-key" };
export const WRITER2: Credentials = { accessKeyId: "writer2-key", secretAccessKey: "writer2-secret-key" };
export const BUCKET = "shared";

const CONFIG_YAML = `
credentials:
  - accessKeyId: ${WRITER.accessKeyId}
    secretAccessKey: ${WRITER.secretAccessKey}
    allow:
      - { bucket: ${BUCKET}, actions: [read, write, lease] }
  - accessKeyId: ${WRITER2.accessKeyId}
    secretAccessKey: ${WRITER2.secretAccessKey}
    allow:
      - { bucket: ${BUCKET}, prefix: team-b/, actions: [read, write, lease] }
`;

/** A gateway whose root credential (an administrator) is ROOT, with the bucket created. */
export async function startConsoleGateway(): Promise<{ gw: TestGateway; stop: () => Promise<void> }> {
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
  const made = await signedRequest(gw.url, { method: "PUT", path: `/${BUCKET}`, credentials: ROOT });
  expect(made.status).toBe(200);
  return {
    gw,
    stop: async () => {
      await gw.stop();
      dir.cleanup();
    },
  };
}

export type Lease = { leaseId: string; token: number; fencingToken: string; owner: string };

/** A lease taken through the lease API (SigV4), as a worker takes it. */
export async function acquire(url: string, who: Credentials, key: string, ttlMs = 30_000): Promise<Lease> {
  const res = await signedRequest(url, {
    method: "POST",
    path: "/_fence/v1/leases",
    body: JSON.stringify({ bucket: BUCKET, key, ttlMs, owner: `${who.accessKeyId}-worker` }),
    headers: { "content-type": "application/json" },
    credentials: who,
  });
  expect(res.status, res.text).toBe(201);
  return JSON.parse(res.text) as Lease;
}

export async function release(url: string, who: Credentials, leaseId: string): Promise<void> {
  const res = await signedRequest(url, {
    method: "DELETE",
    path: `/_fence/v1/leases/${leaseId}`,
    credentials: who,
  });
  expect(res.status, res.text).toBe(204);
}

/** A fenced PutObject; answers the status. */
export async function put(url: string, who: Credentials, key: string, fencingToken: string, body: string) {
  const res = await signedRequest(url, {
    method: "PUT",
    path: objectPath(BUCKET, key),
    headers: { "x-fence-token": fencingToken },
    body,
    credentials: who,
  });
  return res.status;
}

export type ConsoleAnswer = {
  status: number;
  // biome-ignore lint/suspicious/noExplicitAny: the JSON the console answered, checked by each test
  body: any;
  text: string;
  headers: Headers;
};

/** The console's HTTP API as a browser page calls it: one session cookie, the console header. */
export class ConsoleClient {
  cookie: string | undefined;

  constructor(readonly base: string) {}

  async call(
    method: string,
    path: string,
    opts: {
      body?: unknown;
      rawBody?: string;
      headers?: Record<string, string>;
      noConsoleHeader?: boolean;
    } = {},
  ): Promise<ConsoleAnswer> {
    const headers: Record<string, string> = { ...opts.headers };
    if (!opts.noConsoleHeader) headers["x-fencegate-console"] = "1";
    if (this.cookie) headers.cookie = this.cookie;
    let body: string | undefined = opts.rawBody;
    if (opts.body !== undefined) {
      body = JSON.stringify(opts.body);
      headers["content-type"] = "application/json";
    }
    const res = await fetch(`${this.base}/_fence/console/api${path}`, { method, headers, body });
    const text = await res.text();
    const setCookie = res.headers.get("set-cookie");
    if (setCookie) {
      const pair = setCookie.split(";")[0] ?? "";
      this.cookie = pair.endsWith("=") ? undefined : pair;
    }
    let parsed: unknown = null;
    try {
      parsed = text === "" ? null : JSON.parse(text);
    } catch {
      parsed = text;
    }
    return { status: res.status, body: parsed, text, headers: res.headers };
  }

  async signIn(who: Credentials): Promise<ConsoleAnswer> {
    return this.call("POST", "/session", {
      body: { accessKeyId: who.accessKeyId, secretAccessKey: who.secretAccessKey },
    });
  }
}

/** A console client already signed in as `who`. */
export async function signedIn(url: string, who: Credentials): Promise<ConsoleClient> {
  const client = new ConsoleClient(url);
  const res = await client.signIn(who);
  expect(res.status, res.text).toBe(201);
  return client;
}
