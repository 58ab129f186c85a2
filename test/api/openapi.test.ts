import { readFileSync } from "node:fs";
import { join } from "node:path";
import { Ajv2020 } from "ajv/dist/2020.js";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { openApiText, WIRE_FILE, wireText } from "../../scripts/generate-openapi.js";
import { openApiDocument } from "../../scripts/openapi-document.js";
import { type LeaseApiOptions, leaseApi } from "../../src/api/lease-api.js";
import { ROOT, startTestGateway, type TestGateway } from "../support/gateway.js";
import { createResponseChecker, describedOperations, type OpenApiDoc } from "../support/openapi-check.js";
import { checkedResponses, checkLeaseApiResponses } from "../support/openapi-recorder.js";

checkLeaseApiResponses();

const DOC_PATH = join(ROOT, "src/api/openapi.json");
type Served = OpenApiDoc & { servers: { url: string; description?: string }[] };
const doc = JSON.parse(readFileSync(DOC_PATH, "utf8")) as Served;

let gw: TestGateway;
beforeAll(async () => {
  gw = await startTestGateway();
});
afterAll(async () => {
  await gw?.stop();
});

describe("the OpenAPI document", () => {
  // After a change to src/api/schemas.ts or src/api/openapi.ts: npx tsx scripts/generate-openapi.ts
  it("is generated from the lease API's schemas: the file in the repository is the current one", () => {
    expect(doc, "src/api/openapi.json is stale: run scripts/generate-openapi.ts").toEqual(openApiDocument());
    expect(readFileSync(DOC_PATH, "utf8")).toBe(openApiText());
  });

  it("and the client's types (src/client/wire.ts) are the types of the same schemas", () => {
    expect(
      readFileSync(join(ROOT, WIRE_FILE), "utf8"),
      `${WIRE_FILE} is stale: run scripts/generate-openapi.ts`,
    ).toBe(wireText());
  }, 60_000);

  it("is served at /_fence/v1/openapi.json without signing, equal to the file in the repository", async () => {
    const res = await fetch(`${gw.url}/_fence/v1/openapi.json`);
    expect(res.status).toBe(200);
    expect(res.headers.get("content-type")).toMatch(/^application\/json/);
    const served = (await res.json()) as Served;
    expect({ ...served, servers: doc.servers }).toEqual(doc);
    // It names the gateway that serves it, on whatever port that is.
    expect(served.servers).toEqual([
      { url: `${gw.url}/_fence/v1`, description: "the gateway that served this document" },
    ]);
  });

  it("names the address a proxy in front was asked on, and ignores a Host that is no host", async () => {
    const proxied = await fetch(`${gw.url}/_fence/v1/openapi.json`, {
      headers: { "x-forwarded-host": "fence.example.com", "x-forwarded-proto": "https" },
    });
    expect(((await proxied.json()) as Served).servers[0]?.url).toBe("https://fence.example.com/_fence/v1");
    const odd = await fetch(`${gw.url}/_fence/v1/openapi.json`, {
      headers: { "x-forwarded-host": "evil.example/<script>" },
    });
    expect(((await odd.json()) as Served).servers).toEqual(doc.servers);
  });

  it("is OpenAPI 3.1 whose references all resolve and whose path parameters are all declared", () => {
    expect(doc.openapi).toMatch(/^3\.1\.\d+$/);
    const refs: string[] = [];
    JSON.stringify(doc, (k, v) => {
      if (k === "$ref") refs.push(v as string);
      return v;
    });
    expect(refs.length).toBeGreaterThan(10);
    for (const ref of refs) {
      expect(ref, ref).toMatch(/^#\//);
      let node: unknown = doc;
      for (const part of ref.slice(2).split("/")) node = (node as Record<string, unknown>)?.[part];
      expect(node, `${ref} resolves`).toBeTypeOf("object");
    }
    const operationIds = new Set<string>();
    for (const [path, item] of Object.entries(doc.paths)) {
      const declared = new Set<string>();
      const collect = (params: unknown) => {
        for (const p of (params as { $ref?: string; in?: string; name?: string }[] | undefined) ?? []) {
          const param = p.$ref
            ? (doc as unknown as { components: { parameters: Record<string, { in: string; name: string }> } })
                .components.parameters[p.$ref.split("/").pop()!]
            : p;
          if (param?.in === "path") declared.add(param.name!);
        }
      };
      collect(item.parameters);
      for (const [method, op] of Object.entries(item)) {
        if (method === "parameters") continue;
        const operation = op as { operationId: string; responses: object; parameters?: unknown };
        expect(operation.operationId, `${method} ${path}`).toBeTypeOf("string");
        expect(operationIds.has(operation.operationId), operation.operationId).toBe(false);
        operationIds.add(operation.operationId);
        expect(Object.keys(operation.responses).length, `${method} ${path}`).toBeGreaterThan(0);
        collect(operation.parameters);
      }
      for (const name of path.match(/\{([^}]+)\}/g) ?? []) {
        expect(declared.has(name.slice(1, -1)), `${path} declares ${name}`).toBe(true);
      }
    }
  });

  it("has schemas that compile as JSON Schema 2020-12 in strict mode", () => {
    const ajv = new Ajv2020({ strict: true, strictRequired: false, validateFormats: false });
    const schemas = JSON.parse(
      JSON.stringify(doc.components.schemas).replaceAll(
        '"#/components/schemas/',
        '"https://fencegate.invalid/doc#/$defs/',
      ),
    ) as Record<string, object>;
    ajv.addSchema({ $id: "https://fencegate.invalid/doc", $defs: schemas });
    for (const [name, schema] of Object.entries(schemas)) {
      expect(() => ajv.compile({ $id: `https://fencegate.invalid/${name}`, ...schema }), name).not.toThrow();
    }
  });

  it("describes exactly the routes the lease API serves", () => {
    const app = leaseApi({} as LeaseApiOptions);
    const served = new Set(
      app.routes
        .filter((r) => r.method !== "ALL")
        .map((r) => `${r.method} ${r.path.replace(/^\/_fence\/v1/, "").replace(/:(\w+)/g, "{$1}")}`),
    );
    expect(new Set(describedOperations(doc))).toEqual(served);
  });
});

describe("the response checker", () => {
  const { check } = createResponseChecker(doc);
  const lease = {
    leaseId: "l-1",
    bucket: "b",
    key: "k",
    owner: "w",
    token: 3,
    fencingToken: "v1.abc",
    ttlMs: 1000,
    acquiredAt: "2026-11-22T12:00:00.000Z",
    expiresAt: "2026-11-22T12:00:01.000Z",
    state: "active",
  };
  const json = "application/json";
  const answer = (method: string, path: string, status: number, body: unknown) =>
    check({ method, path, status, contentType: json, body: JSON.stringify(body) });

  it("accepts responses that match the document", () => {
    expect(answer("POST", "/_fence/v1/leases", 201, lease)).toEqual([]);
    expect(answer("GET", "/_fence/v1/leases/l-1", 200, lease)).toEqual([]);
    expect(
      check({ method: "DELETE", path: "/_fence/v1/leases/l-1", status: 204, contentType: null, body: "" }),
    ).toEqual([]);
    expect(
      answer("GET", "/_fence/v1/nope", 404, { error: { code: "NotFound", message: "no such endpoint" } }),
    ).toEqual([]);
  });

  it("refuses responses that do not", () => {
    const { token: _t, ...noToken } = lease;
    expect(answer("POST", "/_fence/v1/leases", 201, noToken)).not.toEqual([]);
    expect(answer("POST", "/_fence/v1/leases", 201, { ...lease, key: undefined, prefix: "p/" })).toEqual([]);
    expect(answer("POST", "/_fence/v1/leases", 201, { ...lease, prefix: "p/" })).not.toEqual([]);
    expect(answer("POST", "/_fence/v1/leases", 201, { ...lease, extra: 1 })).not.toEqual([]);
    expect(answer("GET", "/_fence/v1/leases/l-1", 200, { ...lease, expiresAt: "tomorrow" })).not.toEqual([]);
    expect(answer("GET", "/_fence/v1/nope", 200, {})).not.toEqual([]);
    expect(
      answer("POST", "/_fence/v1/leases", 409, { error: { code: "LeaseHeld", heldBy: {} } }),
    ).not.toEqual([]);
    expect(answer("GET", "/_fence/v1/leases", 400, { message: "no code" })).not.toEqual([]);
    expect(
      check({ method: "GET", path: "/_fence/v1/leases", status: 200, contentType: "text/plain", body: "x" }),
    ).not.toEqual([]);
  });

  it("has checked the lease API responses this file received", () => {
    // The health polls and the document fetch above went through the recorder.
    expect(checkedResponses()).toBeGreaterThanOrEqual(2);
  });
});
