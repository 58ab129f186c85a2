import { afterAll, afterEach, beforeAll } from "vitest";
import { type ApiResponse, createResponseChecker, isApiPath } from "./openapi-check.js";
import { rawResponseObservers } from "./raw-observers.js";

/**
 * The OpenAPI check of the test files that test the lease API: a file that calls
 * `checkLeaseApiResponses()` at its top level has every lease API response its tests receive
 * through fetch (the client SDK, the CLI's client, health polls) or through rawRequest
 * (test/support/signed-http.ts) checked against the OpenAPI document, and a test fails when one
 * does not match it. Other files neither load the document nor have their responses recorded
 * (also when a worker runs several files without isolation: recording is on only while a file
 * that asked for it runs).
 */

let checker: ReturnType<typeof createResponseChecker> | undefined;
let active = 0;
let installed = false;
const pending: Promise<void>[] = [];
const problems: string[] = [];
let seen = 0;

/** Checks one lease API response (a no-op for other paths). */
export function recordApiResponse(res: ApiResponse): void {
  if (active === 0 || !isApiPath(res.path)) return;
  seen++;
  checker ??= createResponseChecker();
  problems.push(...checker.check(res));
}

/** How many lease API responses this test file has checked so far. */
export function checkedResponses(): number {
  return seen;
}

function install(): void {
  if (installed) return;
  installed = true;
  const originalFetch = globalThis.fetch;
  globalThis.fetch = async (input, init) => {
    const res = await originalFetch(input, init);
    const url = new URL(input instanceof Request ? input.url : String(input));
    if (active > 0 && isApiPath(url.pathname)) {
      const method = (init?.method ?? (input instanceof Request ? input.method : "GET")).toUpperCase();
      const copy = res.clone();
      pending.push(
        copy.text().then(
          (body) =>
            recordApiResponse({
              method,
              path: url.pathname,
              status: res.status,
              contentType: res.headers.get("content-type"),
              body,
            }),
          () => undefined, // the test itself sees the broken body
        ),
      );
    }
    return res;
  };

  rawResponseObservers.push((x) => {
    // A Host header of its own may name a virtual-hosted bucket: then the path is an object key.
    if (Object.keys(x.headers ?? {}).some((h) => h.toLowerCase() === "host")) return;
    const contentType = x.responseHeaders["content-type"];
    recordApiResponse({
      method: x.method.toUpperCase(),
      path: x.path.split("?")[0] ?? x.path,
      status: x.status,
      contentType: typeof contentType === "string" ? contentType : null,
      body: x.text,
    });
  });
}

async function assertAllMatched(): Promise<void> {
  await Promise.all(pending.splice(0));
  const found = problems.splice(0);
  if (found.length > 0) {
    throw new Error(
      `lease API responses that do not match src/api/openapi.json:\n${found.map((p) => `- ${p}`).join("\n")}`,
    );
  }
}

/** Checks this test file's lease API responses against the OpenAPI document (see above). */
export function checkLeaseApiResponses(): void {
  install();
  beforeAll(() => {
    active++;
  });
  afterEach(assertAllMatched);
  afterAll(async () => {
    try {
      await assertAllMatched();
    } finally {
      active--;
    }
  });
}
