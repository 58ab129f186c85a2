/**
 * The console end to end, in Debian's headless Chromium driven by playwright-core: sign in (a
 * wrong secret first), see a lease appear and count down, see a stale write's refusal arrive on
 * the live feed, follow the object's timeline, break a lease as an administrator; and, signed in
 * as another key, see that key's view: no other key's fencing token, no break button, 403 on a
 * break. Fails (never skips) when /usr/bin/chromium is missing.
 *
 * FENCEGATE_CONSOLE_SCREENSHOT=docs/console.png saves a screenshot of the console on the way.
 */
import { resolve } from "node:path";
import { type BrowserContext, chromium, type Page } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ROOT as REPO_ROOT, type TestGateway, tempDir } from "../support/gateway.js";
import { requireTools, TOOLS } from "../support/tools.js";
import { sleep } from "../support/wait.js";
import {
  acquire,
  BUCKET,
  put,
  ROOT,
  release,
  startConsoleGateway,
  WRITER,
  WRITER2,
} from "./console-support.js";

requireTools("chromium");

let gw: TestGateway;
let stopGateway: () => Promise<void>;
let context: BrowserContext;
let profile: { path: string; cleanup(): void };
let page: Page;

beforeAll(async () => {
  ({ gw, stop: stopGateway } = await startConsoleGateway());
  profile = tempDir("fencegate-chromium-");
  context = await chromium.launchPersistentContext(profile.path, {
    executablePath: TOOLS.chromium.path,
    headless: true,
    viewport: { width: 1360, height: 1000 },
    args: [
      "--headless",
      "--no-sandbox",
      "--disable-gpu",
      "--disable-quic",
      "--no-first-run",
      "--disable-background-networking",
      "--disable-component-update",
      "--disable-sync",
    ],
  });
  page = context.pages()[0] ?? (await context.newPage());
  page.setDefaultTimeout(15_000);
});

afterAll(async () => {
  await context?.close();
  profile?.cleanup();
  await stopGateway?.();
});

/** A list item's left border colour, computed in the page (the suites compile without the DOM's types). */
const MARK_COLOUR = (li: unknown): string =>
  (globalThis as unknown as { getComputedStyle(e: unknown): { borderLeftColor: string } }).getComputedStyle(
    li,
  ).borderLeftColor;

async function signIn(who: { accessKeyId: string; secretAccessKey: string }) {
  await page.fill("#access-key-id", who.accessKeyId);
  await page.fill("#secret-access-key", who.secretAccessKey);
  await page.click("#sign-in button[type=submit]");
}

/** The seconds a lease row's countdown shows. */
async function secondsLeft(leaseId: string): Promise<number> {
  const text = (await page.locator(`#leases tr[data-lease-id="${leaseId}"] .ttl-text`).textContent()) ?? "";
  const m = /^(\d+) min (\d+) s$/.exec(text) ?? /^()([\d.]+) s$/.exec(text);
  if (!m) throw new Error(`the countdown shows ${JSON.stringify(text)}`);
  return Number(m[1] || 0) * 60 + Number(m[2]);
}

describe("the console in a browser", () => {
  it("signs in, shows leases counting down and refusals live, follows an object, and breaks a lease", async () => {
    await page.goto(`${gw.url}/_fence/console/`);
    await page.waitForSelector("#sign-in-view:not([hidden])");

    // A wrong secret: refused, still on the sign-in form, no cookie.
    await signIn({ accessKeyId: ROOT.accessKeyId, secretAccessKey: "wrong-secret" });
    await expect.poll(() => page.textContent("#sign-in-error")).toBe("Wrong access key id or secret.");
    expect(await page.isVisible("#console-view")).toBe(false);
    expect(await context.cookies()).toEqual([]);

    await signIn(ROOT);
    await page.waitForSelector("#console-view:not([hidden])");
    expect(await page.textContent("#principal")).toBe(ROOT.accessKeyId);
    expect(await page.isVisible("#admin-badge")).toBe(true);
    const [cookie] = await context.cookies();
    expect(cookie).toMatchObject({
      name: "fencegate_console",
      httpOnly: true,
      sameSite: "Strict",
      path: "/_fence/",
    });
    // Scripts cannot read the session cookie.
    expect(await page.evaluate("document.cookie")).toBe("");
    await page.waitForSelector("#live.on");

    // A worker takes a lease: it appears, with its owner and token, and counts down.
    const key = "reports/daily.csv";
    const first = await acquire(gw.url, WRITER, key, 60_000);
    const row = page.locator(`#leases tr[data-lease-id="${first.leaseId}"]`);
    await row.waitFor();
    expect(await row.locator(".owner").textContent()).toBe(first.owner);
    expect(await row.locator(".token").textContent()).toBe(String(first.token));
    // An administrator sees the fencing token (the lease API shows it to administrators).
    expect(await row.locator(".fencing-token code").getAttribute("title")).toBe(first.fencingToken);
    const before = await secondsLeft(first.leaseId);
    expect(before).toBeGreaterThan(50);
    expect(before).toBeLessThanOrEqual(60);
    // It ticks in the page (not only when the list is fetched again, every 2 s): four readings
    // within about a second show at least three different values, each lower than the last.
    const readings = [before];
    for (let i = 0; i < 3; i++) {
      await sleep(350);
      readings.push(await secondsLeft(first.leaseId));
    }
    for (let i = 1; i < readings.length; i++) expect(readings[i]).toBeLessThanOrEqual(readings[i - 1]!);
    expect(new Set(readings).size, readings.join(", ")).toBeGreaterThanOrEqual(3);
    expect(readings.at(-1)).toBeGreaterThan(before - 10);

    // The worker writes, loses its lease, another takes it and writes; the first one, paused
    // meanwhile, wakes up and writes with its old token: refused, and the console shows it live.
    expect(await put(gw.url, WRITER, key, first.fencingToken, "v1")).toBe(200);
    await release(gw.url, WRITER, first.leaseId);
    const second = await acquire(gw.url, WRITER, key, 60_000);
    expect(await put(gw.url, WRITER, key, second.fencingToken, "v2")).toBe(200);
    const feedBefore = await page.locator("#decisions li").count();
    expect(await put(gw.url, WRITER, key, first.fencingToken, "stale")).toBe(409);
    const refusal = page.locator("#decisions li.decision-rejected", { hasText: "StaleFencingToken" });
    await refusal.first().waitFor();
    const refusalText = (await refusal.first().textContent()) ?? "";
    expect(refusalText).toContain("PutObject");
    expect(refusalText).toContain(`${BUCKET}/${key}`);
    expect(refusalText).toContain(`token ${first.token}`);
    // It arrived on the open page (no reload): the feed grew.
    expect(await page.locator("#decisions li").count()).toBeGreaterThan(feedBefore);
    // Highlighted: a refusal is drawn unlike an accepted decision.
    const refusalMark = await refusal.first().evaluate(MARK_COLOUR);
    const acceptedMark = await page.locator("#decisions li.decision-accepted").first().evaluate(MARK_COLOUR);
    expect(refusalMark).not.toBe(acceptedMark);
    // The first lease left the table, the second is there.
    await page.locator(`#leases tr[data-lease-id="${first.leaseId}"]`).waitFor({ state: "detached" });
    await page.locator(`#leases tr[data-lease-id="${second.leaseId}"]`).waitFor();

    // The object's timeline: the grants, the writes, the refusal, and the HCT.
    await page.fill("#timeline-bucket", BUCKET);
    await page.fill("#timeline-key", key);
    await page.click("#timeline-form button[type=submit]");
    await page.waitForSelector("#timeline:not([hidden])");
    expect(await page.textContent("#timeline-hct")).toBe(String(second.token));
    const steps = await page.locator("#timeline-records li").allTextContents();
    expect(steps.some((s) => s.includes("LeaseAcquired") && s.includes(`token ${first.token}`))).toBe(true);
    expect(
      steps.some(
        (s) => s.includes("PutObject") && s.includes("accepted") && s.includes(`token ${second.token}`),
      ),
    ).toBe(true);
    expect(steps.some((s) => s.includes("PutObject") && s.includes("StaleFencingToken"))).toBe(true);

    // Audit search with the contract's filters.
    await page.fill("#audit-form [name=key]", key);
    await page.fill("#audit-form [name=bucket]", BUCKET);
    await page.selectOption("#audit-form [name=decision]", "rejected");
    await page.click("#audit-form button[type=submit]");
    await page.locator("#audit-results tbody tr").first().waitFor();
    const found = await page.locator("#audit-results tbody tr").allTextContents();
    expect(found).toHaveLength(1);
    expect(found[0]).toContain("StaleFencingToken");

    const screenshot = process.env.FENCEGATE_CONSOLE_SCREENSHOT;
    if (screenshot) await page.screenshot({ path: resolve(REPO_ROOT, screenshot), fullPage: true });

    // Break the second lease: two clicks (a confirmation), then it is gone and its holder fenced.
    // The list is read again every 2 s: a confirmation waiting across a refresh stays armed.
    const breakButton = page.locator(`#leases tr[data-lease-id="${second.leaseId}"] button.break`);
    await breakButton.click();
    expect(await breakButton.textContent()).toBe("Confirm break");
    await page.waitForTimeout(2_500);
    expect(await breakButton.textContent()).toBe("Confirm break");
    await breakButton.click();
    await page.locator(`#leases tr[data-lease-id="${second.leaseId}"]`).waitFor({ state: "detached" });
    await page.locator("#decisions li", { hasText: "LeaseBroken" }).first().waitFor();
    expect(await put(gw.url, WRITER, key, second.fencingToken, "after the break")).toBe(409);
  });

  it("shows another key only what the lease API shows it: no fencing token, no break button, 403 on a break", async () => {
    const theirs = await acquire(gw.url, WRITER, "reports/theirs.csv", 60_000);
    await page.click("#sign-out");
    await page.waitForSelector("#sign-in-view:not([hidden])");
    expect(await context.cookies()).toEqual([]);

    await signIn(WRITER2);
    await page.waitForSelector("#console-view:not([hidden])");
    expect(await page.textContent("#principal")).toBe(WRITER2.accessKeyId);
    expect(await page.isVisible("#admin-badge")).toBe(false);
    const row = page.locator(`#leases tr[data-lease-id="${theirs.leaseId}"]`);
    await row.waitFor();
    expect(await row.locator(".owner").textContent()).toBe(theirs.owner);
    expect(await row.locator(".fencing-token").textContent()).toBe("another key's");
    expect(await page.locator("button.break").count()).toBe(0);
    expect(await page.content()).not.toContain(theirs.fencingToken);

    // A break forged from the page's own script is refused by the server.
    const answer = await page.evaluate(async (leaseId) => {
      const res = await fetch(`/_fence/console/api/leases/${leaseId}/break`, {
        method: "POST",
        headers: { "x-fencegate-console": "1" },
      });
      return { status: res.status, body: await res.json() };
    }, theirs.leaseId);
    expect(answer).toMatchObject({ status: 403, body: { error: { code: "AccessDenied" } } });
    // The lease is still there, and its holder still writes.
    expect(await put(gw.url, WRITER, "reports/theirs.csv", theirs.fencingToken, "still mine")).toBe(200);
    await release(gw.url, WRITER, theirs.leaseId);
  });
});
