// Helpers shared by the safety acceptance tests (test/safety/**): raw signed HTTP writes with
// paced bodies, S3 error inspection, audit paging, child-process line protocols.
import { type ChildProcess, spawn } from "node:child_process";
import { readFileSync } from "node:fs";
import { request } from "node:http";
import type { AuditRecord } from "../../src/audit/audit-log.js";
import type { LeaseClient } from "../../src/client/lease-client.js";
import { objectPath, signRequest } from "./signed-http.js";
import { sleep } from "./wait.js";

export type { AuditRecord };

/** For S3 clients whose requests are expected to fail (the SDK warns on console otherwise). */
export const quietLogger = { debug() {}, info() {}, warn() {}, error() {} };

/** Every audit record matching the query, following cursors to the end. */
export async function allAuditRecords(
  leases: LeaseClient,
  query: Record<string, string | undefined>,
): Promise<AuditRecord[]> {
  const out: AuditRecord[] = [];
  let cursor: string | undefined;
  for (let page = 0; page < 10_000; page++) {
    const res = await leases.audit({ ...query, limit: "1000", cursor });
    out.push(...(res.records as AuditRecord[]));
    if (!res.nextCursor) return out;
    cursor = res.nextCursor;
  }
  throw new Error("audit paging did not end");
}

/** Status, S3 error code and fencing headers of an S3 call (for a failed SDK call: outcomeOfError). */
export type S3Outcome = {
  status: number;
  code: string | null;
  highestToken: number | null;
  requestId: string | null;
  etag?: string;
};

export function outcomeOfError(err: unknown): S3Outcome {
  const e = err as {
    name?: string;
    Code?: string;
    $metadata?: { httpStatusCode?: number; requestId?: string };
    $response?: { statusCode?: number; headers?: Record<string, string> };
  };
  const status = e.$metadata?.httpStatusCode ?? e.$response?.statusCode;
  if (status === undefined) throw err; // not an HTTP answer (connection refused, reset, ...)
  const headers = e.$response?.headers ?? {};
  const highest = headers["x-fence-highest-token"];
  return {
    status,
    code: e.Code ?? e.name ?? null,
    highestToken: highest === undefined ? null : Number(highest),
    requestId: e.$metadata?.requestId ?? headers["x-amz-request-id"] ?? null,
  };
}

/** The answer to a slowSignedPut. */
export type SlowPutResponse = {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  body: string;
  /** The S3 error <Code>, when the body is an S3 error document. */
  code: string | null;
  highestToken: number | null;
  requestId: string | null;
  /** True when the response head arrived before the last body byte had been written. */
  respondedBeforeBodyEnd: boolean;
};

/**
 * A PutObject sent as a raw SigV4-signed HTTP request with `x-amz-content-sha256:
 * UNSIGNED-PAYLOAD` and a Content-Length, its body written chunk by chunk. `gate(i)` is awaited
 * before chunk i (i >= 1) is written: the test decides when the body continues.
 */
export async function slowSignedPut(opts: {
  endpoint: string;
  bucket: string;
  key: string;
  chunks: Buffer[];
  headers?: Record<string, string>;
  gate: (index: number) => Promise<void>;
  onFirstChunkWritten?: () => void;
}): Promise<SlowPutResponse> {
  const url = new URL(opts.endpoint);
  const total = opts.chunks.reduce((n, c) => n + c.length, 0);
  const signed = await signRequest(opts.endpoint, {
    method: "PUT",
    path: objectPath(opts.bucket, opts.key),
    payloadHash: "UNSIGNED-PAYLOAD",
    headers: { "content-length": String(total), ...opts.headers },
  });
  let bodyEnded = false;
  let responded = false;
  return new Promise<SlowPutResponse>((resolve, reject) => {
    const req = request(
      {
        method: "PUT",
        host: url.hostname,
        port: url.port,
        path: signed.path,
        headers: signed.headers,
        agent: false,
      },
      (res) => {
        const respondedBeforeBodyEnd = !bodyEnded;
        responded = true;
        let body = "";
        res.setEncoding("utf8");
        res.on("data", (d: string) => {
          body += d;
        });
        res.on("error", reject);
        res.on("end", () => {
          const code = /<Code>([^<]*)<\/Code>/.exec(body)?.[1] ?? null;
          const highest = res.headers["x-fence-highest-token"];
          resolve({
            status: res.statusCode ?? 0,
            headers: res.headers,
            body,
            code,
            highestToken: typeof highest === "string" ? Number(highest) : null,
            requestId: (res.headers["x-amz-request-id"] as string | undefined) ?? null,
            respondedBeforeBodyEnd,
          });
        });
      },
    );
    req.on("error", reject);
    (async () => {
      for (let i = 0; i < opts.chunks.length; i++) {
        if (i > 0) await opts.gate(i);
        if (responded || req.destroyed) {
          // Answered early: the rest of the body is not wanted; drop the connection.
          req.destroy();
          return;
        }
        const written = req.write(opts.chunks[i]!);
        if (i === 0) opts.onFirstChunkWritten?.();
        if (!written) await new Promise<void>((r) => req.once("drain", () => r()));
      }
      bodyEnded = true;
      req.end();
    })().catch(reject);
  });
}

/** Reads newline-delimited JSON messages from a child's stdout. */
export class LineReader<T = Record<string, unknown>> {
  private readonly lines: T[] = [];
  private waiters: { pred: (m: T) => boolean; resolve: (m: T) => void; reject: (e: Error) => void }[] = [];
  private buffer = "";
  private ended: Error | null = null;

  constructor(stream: NodeJS.ReadableStream, describe: () => string) {
    stream.setEncoding("utf8");
    stream.on("data", (chunk: string) => {
      this.buffer += chunk;
      const parts = this.buffer.split("\n");
      this.buffer = parts.pop()!;
      for (const line of parts) {
        if (!line.trim()) continue;
        let msg: T;
        try {
          msg = JSON.parse(line) as T;
        } catch {
          continue; // not a protocol line (warnings and the like)
        }
        this.lines.push(msg);
        this.waiters = this.waiters.filter((w) => {
          if (!w.pred(msg)) return true;
          w.resolve(msg);
          return false;
        });
      }
    });
    stream.on("end", () => {
      this.ended = new Error(`the child's output ended:\n${describe()}`);
      for (const w of this.waiters) w.reject(this.ended);
      this.waiters = [];
    });
  }

  /** The first message (already received or still to come) that satisfies `pred`. */
  next(pred: (m: T) => boolean, timeoutMs = 15_000): Promise<T> {
    const seen = this.lines.find(pred);
    if (seen) return Promise.resolve(seen);
    if (this.ended) return Promise.reject(this.ended);
    return new Promise<T>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`no matching line within ${timeoutMs} ms`)), timeoutMs);
      this.waiters.push({
        pred,
        resolve: (m) => {
          clearTimeout(timer);
          resolve(m);
        },
        reject: (e) => {
          clearTimeout(timer);
          reject(e);
        },
      });
    });
  }
}

/** The scheduler state letter of a process (R, S, T = stopped, Z, ...), from /proc. */
export function processState(pid: number): string | null {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    return stat.slice(stat.lastIndexOf(")") + 2, stat.lastIndexOf(")") + 3);
  } catch {
    return null;
  }
}

/** Waits until a process is in the given scheduler state (signals are delivered asynchronously). */
export async function waitForProcessState(pid: number, state: string, timeoutMs = 5000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const now = processState(pid);
    if (now === state) return;
    if (Date.now() > deadline) throw new Error(`process ${pid} is in state ${now}, not ${state}`);
    await sleep(2);
  }
}

/** Kills a child (SIGCONT first, in case it is stopped) and waits for it to exit. */
export async function killChild(child: ChildProcess | undefined, signal: NodeJS.Signals = "SIGKILL") {
  if (!child || child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise<void>((r) => child.once("exit", () => r()));
  child.kill(signal);
  child.kill("SIGCONT");
  await exited;
}

/**
 * Runs a command to completion, collecting its output (with a hard time limit). When the output
 * matches `killOn` (e.g. a server announcing it listens when it should have refused to start),
 * the command is killed at once instead of running into the time limit.
 */
export function runToExit(
  command: string,
  args: string[],
  opts: { cwd?: string; env?: NodeJS.ProcessEnv; timeoutMs?: number; killOn?: RegExp } = {},
): Promise<{ code: number | null; signal: NodeJS.Signals | null; output: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn(command, args, { cwd: opts.cwd, env: opts.env, stdio: ["ignore", "pipe", "pipe"] });
    let output = "";
    const collect = (d: Buffer) => {
      output += d;
      if (opts.killOn?.test(output)) child.kill("SIGKILL");
    };
    child.stdout.on("data", collect);
    child.stderr.on("data", collect);
    const timer = setTimeout(() => {
      child.kill("SIGKILL");
      reject(
        new Error(
          `${command} ${args.join(" ")} did not exit within ${opts.timeoutMs ?? 30_000} ms:\n${output}`,
        ),
      );
    }, opts.timeoutMs ?? 30_000);
    child.on("error", (e) => {
      clearTimeout(timer);
      reject(e);
    });
    child.on("exit", (code, signal) => {
      clearTimeout(timer);
      resolve({ code, signal, output });
    });
  });
}
