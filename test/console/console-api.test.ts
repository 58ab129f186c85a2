/**
 * The console's server side (issue 20, point 3), over plain HTTP: sign-in and its cookie, the
 * CSRF guard, what each principal sees (never another key's fencing token), the break button's
 * endpoint for administrators only, the object timeline, and the live feed of audit decisions
 * over server-sent events.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { TestGateway } from "../support/gateway.js";
import { waitFor } from "../support/wait.js";
import {
  acquire,
  BUCKET,
  ConsoleClient,
  put,
  ROOT,
  release,
  signedIn,
  startConsoleGateway,
  WRITER,
  WRITER2,
} from "./console-support.js";

let gw: TestGateway;
let stop: () => Promise<void>;

beforeAll(async () => {
  ({ gw, stop } = await startConsoleGateway());
});

afterAll(async () => {
  await stop?.();
});

describe("the console's pages", () => {
  it("serves the page and its files from the gateway, with a policy that loads nothing from elsewhere", async () => {
    const redirect = await fetch(`${gw.url}/_fence/console`, { redirect: "manual" });
    expect(redirect.status).toBe(308);
    expect(redirect.headers.get("location")).toBe("/_fence/console/");
    const page = await fetch(`${gw.url}/_fence/console/`);
    expect(page.status).toBe(200);
    expect(page.headers.get("content-type")).toMatch(/^text\/html/);
    const html = await page.text();
    expect(html).toContain('src="/_fence/console/assets/console.js"');
    expect(html).not.toMatch(/https?:\/\//);
    expect(page.headers.get("content-security-policy")).toContain("default-src 'none'");
    expect(page.headers.get("content-security-policy")).toContain("script-src 'self'");
    for (const [file, type] of [
      ["console.js", /^text\/javascript/],
      ["console.css", /^text\/css/],
    ] as const) {
      const res = await fetch(`${gw.url}/_fence/console/assets/${file}`);
      expect(res.status).toBe(200);
      expect(res.headers.get("content-type")).toMatch(type);
      expect(await res.text()).not.toMatch(/https?:\/\/(?!www\.w3\.org)/);
    }
    const missing = await fetch(`${gw.url}/_fence/console/assets/nothing.js`);
    expect(missing.status).toBe(404);
    expect(((await missing.json()) as { error: { code: string } }).error.code).toBe("NotFound");
  });
});

describe("signing in", () => {
  it("refuses a wrong secret and an unknown key alike, with 401 and no cookie", async () => {
    for (const attempt of [
      { accessKeyId: ROOT.accessKeyId, secretAccessKey: "not-the-secret" },
      { accessKeyId: "nobody", secretAccessKey: ROOT.secretAccessKey },
    ]) {
      const client = new ConsoleClient(gw.url);
      const res = await client.call("POST", "/session", { body: attempt });
      expect(res.status).toBe(401);
      expect(res.body.error.code).toBe("InvalidCredentials");
      expect(res.headers.get("set-cookie")).toBeNull();
      expect((await client.call("GET", "/leases")).status).toBe(401);
    }
  });

  it("refuses a malformed sign-in with 400, never a 500", async () => {
    const client = new ConsoleClient(gw.url);
    for (const rawBody of ["not json", "[]", '{"accessKeyId": 3}', "x".repeat(20_000)]) {
      const res = await client.call("POST", "/session", {
        rawBody,
        headers: { "content-type": "application/json" },
      });
      expect(res.status, rawBody.slice(0, 20)).toBe(400);
      expect(res.body.error.code).toBe("InvalidRequest");
    }
  });

  it("hands out a short-lived HttpOnly, SameSite=Strict cookie for the gateway's paths; signing out ends it", async () => {
    const client = new ConsoleClient(gw.url);
    const res = await client.signIn(ROOT);
    expect(res.status).toBe(201);
    expect(res.body).toMatchObject({ principal: ROOT.accessKeyId, admin: true, gateway: gw.gatewayId });
    const cookie = res.headers.get("set-cookie") ?? "";
    expect(cookie).toMatch(/^fencegate_console=[A-Za-z0-9_-]{43};/);
    expect(cookie).toContain("HttpOnly");
    expect(cookie).toContain("SameSite=Strict");
    expect(cookie).toContain("Path=/_fence/");
    expect(Number(/Max-Age=(\d+)/.exec(cookie)?.[1])).toBeLessThanOrEqual(12 * 3600);
    // The secret is nowhere in the answer.
    expect(res.text).not.toContain(ROOT.secretAccessKey);
    const saved = client.cookie;
    expect((await client.call("GET", "/session")).body.principal).toBe(ROOT.accessKeyId);

    const out = await client.call("DELETE", "/session");
    expect(out.status).toBe(204);
    expect(out.headers.get("set-cookie")).toContain("Max-Age=0");
    // The old cookie, replayed, is refused: the session is gone on the server too.
    client.cookie = saved;
    const after = await client.call("GET", "/leases");
    expect(after.status).toBe(401);
    expect(after.body.error.code).toBe("NotSignedIn");
  });

  it("refuses every data call without a session or with a made-up one", async () => {
    const client = new ConsoleClient(gw.url);
    for (const cookie of [
      undefined,
      "fencegate_console=AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",
      "fencegate_console=x",
    ]) {
      client.cookie = cookie;
      for (const path of ["/session", "/leases", "/audit", "/events", `/timeline?bucket=${BUCKET}&key=a`]) {
        const res = await client.call("GET", path);
        expect(res.status, `${path} with ${cookie}`).toBe(401);
      }
      expect((await client.call("POST", "/leases/whatever/break")).status).toBe(401);
    }
  });
});

describe("requests that change something", () => {
  it("need the console's header and no foreign Origin, even with a valid session", async () => {
    const admin = await signedIn(gw.url, ROOT);
    const lease = await acquire(gw.url, WRITER, "csrf/one");
    const bare = await admin.call("POST", `/leases/${lease.leaseId}/break`, { noConsoleHeader: true });
    expect(bare.status).toBe(403);
    expect(bare.body.error.message).toContain("x-fencegate-console");
    const foreign = await admin.call("POST", `/leases/${lease.leaseId}/break`, {
      headers: { origin: "https://evil.example" },
    });
    expect(foreign.status).toBe(403);
    // A sign-in posted by another site's form is refused the same way.
    const forged = await new ConsoleClient(gw.url).call("POST", "/session", {
      body: { accessKeyId: ROOT.accessKeyId, secretAccessKey: ROOT.secretAccessKey },
      noConsoleHeader: true,
    });
    expect(forged.status).toBe(403);
    // Nothing happened to the lease.
    const leases = (await admin.call("GET", `/leases?bucket=${BUCKET}&prefix=csrf/`)).body.leases;
    expect(leases.map((l: { leaseId: string }) => l.leaseId)).toEqual([lease.leaseId]);
    await release(gw.url, WRITER, lease.leaseId);
  });
});

describe("what each principal sees", () => {
  it("shows a lease's fencing token only to the key that took it and to administrators", async () => {
    const lease = await acquire(gw.url, WRITER, "seen/by-all");
    const byKey = async (client: ConsoleClient) => {
      const res = await client.call("GET", `/leases?bucket=${BUCKET}&prefix=seen/`);
      expect(res.status).toBe(200);
      return res;
    };
    const mine = await byKey(await signedIn(gw.url, WRITER));
    expect(mine.body.leases).toEqual([
      expect.objectContaining({
        leaseId: lease.leaseId,
        token: lease.token,
        fencingToken: lease.fencingToken,
      }),
    ]);
    const admin = await byKey(await signedIn(gw.url, ROOT));
    expect(admin.body.leases[0].fencingToken).toBe(lease.fencingToken);

    const other = await byKey(await signedIn(gw.url, WRITER2));
    expect(other.body.leases).toHaveLength(1);
    expect(other.body.leases[0]).toMatchObject({
      leaseId: lease.leaseId,
      owner: lease.owner,
      token: lease.token,
    });
    expect(other.body.leases[0]).not.toHaveProperty("fencingToken");
    expect(other.text).not.toContain(lease.fencingToken);

    // The timeline shows the covering lease the same way.
    const timeline = await (await signedIn(gw.url, WRITER2)).call(
      "GET",
      `/timeline?bucket=${BUCKET}&key=${encodeURIComponent("team-b/x")}`,
    );
    expect(timeline.status).toBe(200);
    await release(gw.url, WRITER, lease.leaseId);
  });

  it("lets only an administrator break a lease; anyone else gets 403 and the lease stays", async () => {
    const lease = await acquire(gw.url, WRITER, "break/me");
    for (const who of [WRITER, WRITER2]) {
      const res = await (await signedIn(gw.url, who)).call("POST", `/leases/${lease.leaseId}/break`);
      expect(res.status, who.accessKeyId).toBe(403);
      expect(res.body.error.code).toBe("AccessDenied");
    }
    expect(await put(gw.url, WRITER, "break/me", lease.fencingToken, "before")).toBe(200);

    const admin = await signedIn(gw.url, ROOT);
    const broken = await admin.call("POST", `/leases/${lease.leaseId}/break`);
    expect(broken.status, broken.text).toBe(200);
    expect(broken.body).toMatchObject({ leaseId: lease.leaseId });
    expect(broken.body.floorToken).toBeGreaterThan(lease.token);
    const left = (await admin.call("GET", `/leases?bucket=${BUCKET}&prefix=break/`)).body.leases;
    expect(left).toEqual([]);
    // The old holder is fenced off at once.
    expect(await put(gw.url, WRITER, "break/me", lease.fencingToken, "after")).toBe(409);
    // And the audit log says who did it.
    const audit = await admin.call("GET", `/audit?leaseId=${lease.leaseId}&op=LeaseBroken`);
    expect(audit.body.records).toEqual(
      expect.arrayContaining([
        expect.objectContaining({
          principal: WRITER2.accessKeyId,
          decision: "rejected",
          reason: "AccessDenied",
        }),
        expect.objectContaining({ principal: ROOT.accessKeyId, decision: "accepted" }),
      ]),
    );
  });

  it("answers the object timeline only to keys that may read the object", async () => {
    const denied = await (await signedIn(gw.url, WRITER2)).call(
      "GET",
      `/timeline?bucket=${BUCKET}&key=team-a/x`,
    );
    expect(denied.status).toBe(403);
    expect(denied.body.error.code).toBe("AccessDenied");
    const admin = await signedIn(gw.url, ROOT);
    expect((await admin.call("GET", `/timeline?bucket=${BUCKET}`)).status).toBe(400);
    // A key S3 refuses (a NUL) and a bucket name S3 refuses: 400, never a 500.
    expect((await admin.call("GET", `/timeline?bucket=${BUCKET}&key=a%00b`)).status).toBe(400);
    expect((await admin.call("GET", "/timeline?bucket=Not_A_Bucket&key=a")).status).toBe(400);
    // The lease list's filters are the lease API's: an odd one finds nothing, and is no crash.
    const odd = await admin.call("GET", "/leases?bucket=a%00");
    expect(odd.status).toBe(200);
    expect(odd.body.leases).toEqual([]);
    // An object nobody wrote (its bucket need not exist: a deleted bucket keeps its audit
    // records): an empty timeline, no HCT.
    const none = await admin.call("GET", "/timeline?bucket=no-such-bucket&key=a");
    expect(none.status, none.text).toBe(200);
    expect(none.body).toMatchObject({ highestToken: null, records: [], leases: [] });
  });

  it("applies the audit log's filters and refuses bad ones with 400", async () => {
    const admin = await signedIn(gw.url, ROOT);
    const bad = await admin.call("GET", "/audit?decision=maybe");
    expect(bad.status).toBe(400);
    expect((await admin.call("GET", "/audit?since=yesterday")).status).toBe(400);
    expect((await admin.call("GET", "/audit?limit=5000")).status).toBe(400);
    const ok = await admin.call("GET", "/audit?op=LeaseBroken&limit=1");
    expect(ok.status).toBe(200);
    expect(ok.body.records).toHaveLength(1);
    expect(ok.body.records[0].op).toBe("LeaseBroken");
  });
});

describe("the object timeline and the live feed", () => {
  it("streams a stale write's refusal as it happens, and the timeline shows grants, writes, the refusal and the HCT", async () => {
    const key = "live/report.csv";
    const admin = await signedIn(gw.url, ROOT);
    const res = await fetch(`${gw.url}/_fence/console/api/events`, {
      headers: { cookie: admin.cookie ?? "" },
    });
    expect(res.status).toBe(200);
    expect(res.headers.get("content-type")).toMatch(/^text\/event-stream/);
    const events: {
      event: string;
      data: {
        records?: { op: string; decision: string; reason: string | null; key: string | null; seq: number }[];
      };
    }[] = [];
    const reader = res.body!.getReader();
    let buffered = "";
    const reading = (async () => {
      const decoder = new TextDecoder();
      for (;;) {
        const { done, value } = await reader.read();
        if (done) return;
        buffered += decoder.decode(value, { stream: true });
        let end = buffered.indexOf("\n\n");
        while (end >= 0) {
          const block = buffered.slice(0, end);
          buffered = buffered.slice(end + 2);
          const event = /^event: (.*)$/m.exec(block)?.[1] ?? "message";
          const data = /^data: (.*)$/m.exec(block)?.[1];
          if (data) events.push({ event, data: JSON.parse(data) });
          end = buffered.indexOf("\n\n");
        }
      }
    })().catch(() => undefined);
    try {
      await waitFor(() => events.some((e) => e.event === "audit"), {
        what: "the backlog",
        timeoutMs: 10_000,
      });
      expect(events[0]?.event).toBe("hello");

      const first = await acquire(gw.url, WRITER, key);
      expect(await put(gw.url, WRITER, key, first.fencingToken, "one")).toBe(200);
      await release(gw.url, WRITER, first.leaseId);
      const second = await acquire(gw.url, WRITER, key);
      expect(await put(gw.url, WRITER, key, second.fencingToken, "two")).toBe(200);
      // The paused first holder wakes up and writes with its old token: refused.
      expect(await put(gw.url, WRITER, key, first.fencingToken, "stale")).toBe(409);

      const live = (e: (typeof events)[number]) =>
        (e.data.records ?? []).find((r) => r.key === key && r.decision === "rejected");
      const refusal = await waitFor(() => events.map(live).find((r) => r !== undefined), {
        what: "the refusal on the live feed",
        timeoutMs: 15_000,
      });
      expect(refusal).toMatchObject({ op: "PutObject", reason: "StaleFencingToken" });

      const timeline = await admin.call("GET", `/timeline?bucket=${BUCKET}&key=${encodeURIComponent(key)}`);
      expect(timeline.status).toBe(200);
      expect(timeline.body.highestToken).toBe(second.token);
      expect(timeline.body.leases).toEqual([expect.objectContaining({ leaseId: second.leaseId })]);
      const steps = timeline.body.records.map((r: { op: string; decision: string; token: number | null }) => [
        r.op,
        r.decision,
        r.token,
      ]);
      expect(steps).toEqual(
        expect.arrayContaining([
          ["LeaseAcquired", "accepted", first.token],
          ["PutObject", "accepted", first.token],
          ["LeaseAcquired", "accepted", second.token],
          ["PutObject", "accepted", second.token],
          ["PutObject", "rejected", first.token],
        ]),
      );
      await release(gw.url, WRITER, second.leaseId);
    } finally {
      await reader.cancel().catch(() => undefined);
      await reading;
    }
  });

  it("ends the live feed of a session that signs out", async () => {
    const client = await signedIn(gw.url, ROOT);
    const res = await fetch(`${gw.url}/_fence/console/api/events`, {
      headers: { cookie: client.cookie ?? "" },
    });
    expect(res.status).toBe(200);
    const other = await signedIn(gw.url, ROOT);
    const kept = await fetch(`${gw.url}/_fence/console/api/events`, {
      headers: { cookie: other.cookie ?? "" },
    });
    await client.call("DELETE", "/session");
    // Signing out ends the session's feeds at once (not at their next heartbeat).
    const started = performance.now();
    const text = await res.text();
    expect(performance.now() - started).toBeLessThan(8_000);
    expect(text).toContain("event: signed-out");
    // Another session's feed goes on.
    const reader = kept.body!.getReader();
    const first = new TextDecoder().decode((await reader.read()).value);
    expect(first).toContain("event: hello");
    await reader.cancel();
  });
});

describe("a shutdown", () => {
  it("ends the open live feeds instead of waiting for them", async () => {
    const own = await startConsoleGateway();
    try {
      const client = await signedIn(own.gw.url, ROOT);
      const res = await fetch(`${own.gw.url}/_fence/console/api/events`, {
        headers: { cookie: client.cookie ?? "" },
      });
      expect(res.status).toBe(200);
      const body = res.text().catch(() => "");
      const started = performance.now();
      // With a bound of 20 s: requests in flight get up to that long; a feed is not one to wait for.
      await own.gw.close(20_000);
      expect(performance.now() - started).toBeLessThan(8_000);
      expect(await body).toContain("event: hello");
    } finally {
      await own.stop();
    }
  });
});
