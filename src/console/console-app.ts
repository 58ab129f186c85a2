import { existsSync, readFileSync } from "node:fs";
import type { IncomingMessage } from "node:http";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import type { Context } from "hono";
import { Hono } from "hono";
import { z } from "zod";
import type { AccessPolicy } from "../access/access-policy.js";
import { toApiError } from "../api/errors.js";
import { noteLease } from "../api/lease-api.js";
import { leaseView } from "../api/lease-view.js";
import { AuditQuery, filter, ListQuery, parseQuery } from "../api/schemas.js";
import type { AuditLog, AuditRecord } from "../audit/audit-log.js";
import { DomainError } from "../core/errors.js";
import { bucketNameProblem, objectKeyProblem } from "../core/key-rules.js";
import type { Logger, RequestSummary } from "../core/log.js";
import type { Keyring } from "../fence/tokens.js";
import type { Caller, LeaseInfo, LeaseService } from "../leases/lease-service.js";
import { AuditTail } from "./audit-tail.js";
import { clearedCookie, type Session, SessionStore, sameSecret, sessionIdFrom } from "./session.js";

const CONSOLE_BASE = "/_fence/console";
/** Every state-changing console call carries it: a form or a link from another site cannot. */
const CONSOLE_HEADER = "x-fencegate-console";

type ConsoleEnv = {
  /** `summary`: what the gateway's request log line says of the request (filled in as learnt). */
  Bindings: { incoming: IncomingMessage; requestId: string; summary?: RequestSummary };
  Variables: { session: Session };
};

type ConsoleOptions = {
  leases: LeaseService;
  keyring: Keyring;
  access: AccessPolicy;
  audit: AuditLog;
  /** The secret of an access key (as the lease API's authentication looks it up), if it exists. */
  secretOf: (accessKeyId: string) => string | undefined;
  /** The object's highest committed token (null when nothing was committed). */
  highestToken: (bucket: string, key: string) => Promise<number | null>;
  gatewayId: string;
  log: Logger;
  now?: () => number;
  /** Session idle timeout (default 30 min). */
  sessionIdleMs?: number;
  /** How often the audit log is polled for the live feed (default 500 ms). */
  pollMs?: number;
};

type ConsoleApp = {
  fetch: (req: Request, env: ConsoleEnv["Bindings"]) => Response | Promise<Response>;
  /** Ends every live feed (a shutdown must not wait for them). */
  close(): void;
};

const MAX_BODY_BYTES = 8 * 1024;
const HEARTBEAT_MS = 10_000;
/** A sign-in that fails waits this long before it is answered, to slow guessing. */
const FAILED_SIGN_IN_DELAY_MS = 300;
/** Per object, the timeline keeps this many of its latest records. */
const TIMELINE_RECORDS = 500;
const TimelineQuery = z.object({ bucket: filter("bucket"), key: filter("key") });

const SECURITY_HEADERS: Record<string, string> = {
  "content-security-policy":
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; " +
    "base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
  "x-content-type-options": "nosniff",
  "x-frame-options": "DENY",
  "referrer-policy": "no-referrer",
  "cache-control": "no-store",
};

type Asset = { body: string; type: string };

/**
 * The browser console at /_fence/console/: static pages, and a small JSON API behind a session
 * cookie. Every data call asks the same services, with the same caller, as the lease API: a
 * principal sees what the lease API shows it (another principal's fencing token never), and only
 * an administrator breaks a lease.
 */
export function consoleApp(opts: ConsoleOptions): ConsoleApp {
  const now = opts.now ?? Date.now;
  const sessions = new SessionStore({ now, idleMs: opts.sessionIdleMs });
  const tail = new AuditTail({ audit: opts.audit, now, log: opts.log, pollMs: opts.pollMs });
  /** Each live feed's closer, with the session it serves. */
  const feeds = new Map<() => void, { sessionId: string; signOut: () => void }>();
  const assets = loadAssets(opts.log);
  const app = new Hono<ConsoleEnv>({ strict: true });
  const at = (path: string) => `${CONSOLE_BASE}${path}`;

  const caller = (c: Context<ConsoleEnv>): Caller => ({
    principal: c.get("session").principal,
    requestId: c.env.requestId,
  });
  const viewFor = (c: Context<ConsoleEnv>) => (lease: LeaseInfo) =>
    leaseView(lease, opts.keyring, opts.leases.actsFor(lease, caller(c)));
  /** A session whose access key still exists (a delegate's ends with its lease). */
  const liveSession = (id: string | undefined): Session | null => {
    const session = sessions.touch(id);
    if (session && opts.secretOf(session.principal) === undefined) {
      sessions.end(session.id);
      return null;
    }
    return session;
  };

  app.onError((err, c) => {
    if (!(err instanceof DomainError)) opts.log.warn({ err }, "console request failed");
    const e = toApiError(err);
    if (c.env.summary) c.env.summary.code = String(e.body.error.code);
    return json(e.body, e.status);
  });
  app.notFound((c) =>
    json({ error: { code: "NotFound", message: `no such console path: ${c.req.path}` } }, 404),
  );

  const page = (name: string) => () => {
    const asset = assets.get(name);
    if (!asset && assets.size > 0) {
      return json({ error: { code: "NotFound", message: `no such console file: ${name}` } }, 404);
    }
    if (!asset) {
      return new Response("the console's files are not installed with this gateway\n", {
        status: 503,
        headers: { "content-type": "text/plain; charset=utf-8", ...SECURITY_HEADERS },
      });
    }
    return new Response(asset.body, {
      headers: { "content-type": asset.type, ...SECURITY_HEADERS, "cache-control": "no-cache" },
    });
  };
  app.get(CONSOLE_BASE, (c) => c.redirect(`${CONSOLE_BASE}/`, 308));
  app.get(at("/"), page("index.html"));
  app.get(at("/assets/:name"), (c) => page(c.req.param("name") ?? "")());

  // State-changing calls: the console's own header, and no foreign Origin (with SameSite=Strict).
  app.use(at("/api/*"), async (c, next) => {
    if (c.req.method !== "GET" && c.req.method !== "HEAD") {
      if (c.req.header(CONSOLE_HEADER) !== "1") {
        return json(
          denied(`console requests that change something must carry the header ${CONSOLE_HEADER}: 1`),
          403,
        );
      }
      const origin = c.req.header("origin");
      if (origin !== undefined && origin !== "null" && !sameOrigin(origin, c.req.header("host"))) {
        return json(denied("the request comes from another site"), 403);
      }
    }
    await next();
  });

  app.post(at("/api/session"), async (c) => {
    const body = await jsonBody(c.req.raw);
    const accessKeyId = body.accessKeyId;
    const secret = body.secretAccessKey;
    if (
      typeof accessKeyId !== "string" ||
      typeof secret !== "string" ||
      accessKeyId === "" ||
      secret === ""
    ) {
      return json(invalid("accessKeyId and secretAccessKey are required strings"), 400);
    }
    if (accessKeyId.length > 256 || secret.length > 256) {
      return json(invalid("accessKeyId and secretAccessKey are at most 256 characters"), 400);
    }
    const expected = opts.secretOf(accessKeyId);
    // Compared even for an unknown key, so that timing does not tell which keys exist.
    const matches = sameSecret(secret, expected ?? "\u0000no such key") && expected !== undefined;
    if (!matches) {
      opts.log.info({ principal: accessKeyId, requestId: c.env.requestId }, "console sign-in refused");
      await new Promise((resolve) => setTimeout(resolve, FAILED_SIGN_IN_DELAY_MS));
      return json(
        {
          error: {
            code: "InvalidCredentials",
            message: "the access key id or the secret access key is wrong",
          },
        },
        401,
      );
    }
    const session = sessions.create(accessKeyId);
    opts.log.info({ principal: accessKeyId, requestId: c.env.requestId }, "console sign-in");
    const res = json(whoami(session), 201);
    res.headers.set("set-cookie", sessions.cookieFor(session));
    return res;
  });

  app.delete(at("/api/session"), (c) => {
    const id = sessionIdFrom(c.req.header("cookie"));
    sessions.end(id);
    // Its live feeds end now, not at their next heartbeat.
    for (const feed of [...feeds.values()]) if (feed.sessionId === id) feed.signOut();
    const res = new Response(null, { status: 204, headers: SECURITY_HEADERS });
    res.headers.set("set-cookie", clearedCookie());
    return res;
  });

  app.use(at("/api/*"), async (c, next) => {
    const session = liveSession(sessionIdFrom(c.req.header("cookie")));
    if (!session) {
      return json({ error: { code: "NotSignedIn", message: "sign in to the console first" } }, 401);
    }
    c.set("session", session);
    if (c.env.summary) c.env.summary.principal = session.principal;
    await next();
  });

  const whoami = (session: Session) => ({
    principal: session.principal,
    admin: opts.access.isAdmin(session.principal),
    expiresAt: new Date(session.expiresAt).toISOString(),
    gateway: opts.gatewayId,
    serverTime: new Date(now()).toISOString(),
  });

  app.get(at("/api/session"), (c) => json(whoami(c.get("session"))));

  app.get(at("/api/leases"), async (c) => {
    const leases = await opts.leases.list(parseQuery(ListQuery, c));
    return json({ leases: leases.map(viewFor(c)), serverTime: new Date(now()).toISOString() });
  });

  // The lease API's break: administrators only (LeaseService.breakLease refuses anyone else).
  app.post(at("/api/leases/:leaseId/break"), async (c) => {
    const { lease, floorToken } = await opts.leases.breakLease(c.req.param("leaseId") ?? "", caller(c));
    opts.log.info(
      { principal: caller(c).principal, leaseId: lease.leaseId },
      "lease broken from the console",
    );
    noteLease(c.env.summary, lease);
    return json({ ...viewFor(c)(lease), floorToken });
  });

  app.get(at("/api/audit"), async (c) => json(await opts.audit.query(parseQuery(AuditQuery, c))));

  app.get(at("/api/timeline"), async (c) => {
    const { bucket, key } = parseQuery(TimelineQuery, c);
    if (bucket === undefined || key === undefined) return json(invalid("bucket and key are required"), 400);
    // S3's own rules: what no write could ever have used has no timeline.
    const problem = bucketNameProblem(bucket) ?? objectKeyProblem(key)?.message;
    if (problem) return json(invalid(problem), 400);
    const { principal } = caller(c);
    if (principal === null || !opts.access.allows(principal, "read", bucket, { key })) {
      return json(denied(`may not read ${bucket}/${key}`), 403);
    }
    const highestToken = await opts.highestToken(bucket, key);
    const records: AuditRecord[] = [];
    let cursor: string | undefined;
    let truncated = false;
    for (let page = 0; page < 20; page++) {
      const answer = await opts.audit.query({ bucket, key, limit: 1000, cursor });
      records.push(...answer.records);
      if (records.length > TIMELINE_RECORDS) {
        records.splice(0, records.length - TIMELINE_RECORDS);
        truncated = true;
      }
      if (answer.nextCursor === null) break;
      cursor = answer.nextCursor;
    }
    const covering = (await opts.leases.list({ bucket })).filter((l) =>
      l.key !== undefined ? l.key === key : key.startsWith(l.prefix ?? ""),
    );
    return json({
      bucket,
      key,
      highestToken,
      leases: covering.map(viewFor(c)),
      records,
      truncated,
      serverTime: new Date(now()).toISOString(),
    });
  });

  // Server-sent events: the newest audit records, then each new one as it is committed.
  app.get(at("/api/events"), (c) => {
    const session = c.get("session");
    const encoder = new TextEncoder();
    let cleanup: () => void = () => undefined;
    const body = new ReadableStream<Uint8Array>({
      start: async (controller) => {
        let open = true;
        const send = (event: string, data: unknown) => {
          if (!open) return;
          try {
            controller.enqueue(encoder.encode(`event: ${event}\ndata: ${JSON.stringify(data)}\n\n`));
          } catch {
            finish();
          }
        };
        const finish = () => {
          if (!open) return;
          open = false;
          clearInterval(heartbeat);
          subscription?.stop();
          feeds.delete(finish);
          try {
            controller.close();
          } catch {
            // already closed by the client going away
          }
        };
        cleanup = finish;
        const signOut = () => {
          send("signed-out", { message: "the console session ended; sign in again" });
          finish();
        };
        feeds.set(finish, { sessionId: session.id, signOut });
        const ended = () => {
          if (sessions.alive(session) && opts.secretOf(session.principal) !== undefined) return false;
          signOut();
          return true;
        };
        const heartbeat = setInterval(() => {
          if (ended()) return;
          sessions.touch(session.id);
          send("ping", { serverTime: new Date(now()).toISOString() });
        }, HEARTBEAT_MS);
        heartbeat.unref();
        let subscription: { stop: () => void } | undefined;
        send("hello", whoami(session));
        const { recent, stop } = await tail.listen((records) => {
          if (!ended()) send("audit", { records });
        });
        subscription = { stop };
        if (!open) stop();
        else send("audit", { records: recent, backlog: true });
      },
      cancel: () => cleanup(),
    });
    c.env.incoming.once("close", () => cleanup());
    return new Response(body, {
      headers: {
        ...SECURITY_HEADERS,
        "content-type": "text/event-stream; charset=utf-8",
        "x-accel-buffering": "no",
      },
    });
  });

  return {
    fetch: (req, env) => app.fetch(req, env),
    close() {
      tail.close();
      for (const finish of [...feeds.keys()]) finish();
    },
  };
}

/**
 * Whether a request target is the console's: its first two path segments are `_fence` and
 * `console`.
 */
export function isConsolePath(path: string): boolean {
  const [first, second] = path.split("/").filter((seg) => seg !== "");
  return first === "_fence" && second === "console";
}

function json(body: unknown, status = 200): Response {
  return new Response(JSON.stringify(body), {
    status,
    headers: { ...SECURITY_HEADERS, "content-type": "application/json" },
  });
}

function denied(message: string) {
  return { error: { code: "AccessDenied", message } };
}

function invalid(message: string) {
  return { error: { code: "InvalidRequest", message } };
}

function sameOrigin(origin: string, host: string | undefined): boolean {
  try {
    return host !== undefined && new URL(origin).host === host;
  } catch {
    return false;
  }
}

/** A small JSON object body; anything else is an InvalidRequest. */
async function jsonBody(req: Request): Promise<Record<string, unknown>> {
  const declared = Number(req.headers.get("content-length") ?? "0");
  if (declared > MAX_BODY_BYTES)
    throw new DomainError("InvalidRequest", `the body exceeds ${MAX_BODY_BYTES} bytes`);
  const chunks: Uint8Array[] = [];
  let size = 0;
  if (req.body) {
    for await (const chunk of req.body as unknown as AsyncIterable<Uint8Array>) {
      size += chunk.byteLength;
      if (size > MAX_BODY_BYTES)
        throw new DomainError("InvalidRequest", `the body exceeds ${MAX_BODY_BYTES} bytes`);
      chunks.push(chunk);
    }
  }
  let parsed: unknown;
  try {
    parsed = JSON.parse(Buffer.concat(chunks).toString("utf8"));
  } catch {
    throw new DomainError("InvalidRequest", "the request body must be a JSON object");
  }
  if (typeof parsed !== "object" || parsed === null || Array.isArray(parsed)) {
    throw new DomainError("InvalidRequest", "the request body must be a JSON object");
  }
  return parsed as Record<string, unknown>;
}

const TYPES: Record<string, string> = {
  ".html": "text/html; charset=utf-8",
  ".js": "text/javascript; charset=utf-8",
  ".css": "text/css; charset=utf-8",
};

/**
 * The console's files, read once: next to this module (src/console/assets in a checkout), or
 * from the sources beside a compiled dist/.
 */
function loadAssets(log: Logger): Map<string, Asset> {
  const here = fileURLToPath(new URL("./assets/", import.meta.url));
  const dir = [here, join(here, "..", "..", "..", "src", "console", "assets")].find((d) =>
    existsSync(join(d, "index.html")),
  );
  const assets = new Map<string, Asset>();
  if (dir === undefined) {
    log.warn({ looked: here }, "the console's files were not found; /_fence/console/ answers 503");
    return assets;
  }
  for (const name of ["index.html", "console.js", "console.css"]) {
    const ext = name.slice(name.lastIndexOf("."));
    assets.set(name, { body: readFileSync(join(dir, name), "utf8"), type: TYPES[ext] ?? "text/plain" });
  }
  return assets;
}
