import { Ajv2020, type ValidateFunction } from "ajv/dist/2020.js";
import addFormatsModule from "ajv-formats";
import openapi from "../../src/api/openapi.json" with { type: "json" };

/**
 * Checks lease API responses against the OpenAPI document in the repository
 * (src/api/openapi.json): the path and method must be described, the status must be one of the
 * operation's responses (or its `default`), and a JSON body must match the response's schema.
 * A response of a path the document does not describe must be a JSON error (the API's 404
 * for unknown endpoints, or an authentication refusal).
 */

export const API_BASE = "/_fence/v1";

type Schema = Record<string, unknown>;
type Operation = { responses: Record<string, Schema> };
type PathItem = Record<string, unknown>;

const DOC_ID = "https://fencegate.invalid/openapi.json";
const METHODS = ["get", "put", "post", "delete", "patch", "head", "options"];

// ajv-formats is CommonJS: its default export is the plugin or an object holding it.
const addFormats = ((addFormatsModule as { default?: unknown }).default ?? addFormatsModule) as (
  ajv: Ajv2020,
) => Ajv2020;

export type ApiResponse = {
  method: string;
  /** The request path, without the query. */
  path: string;
  status: number;
  contentType: string | null;
  body: string;
};

export type OpenApiDoc = {
  openapi: string;
  paths: Record<string, PathItem>;
  components: { schemas: Record<string, Schema>; responses?: Record<string, Schema> };
};

export function createResponseChecker(doc: OpenApiDoc = openapi as unknown as OpenApiDoc) {
  const ajv = new Ajv2020({ allErrors: true, strict: false });
  addFormats(ajv);
  // The whole document under one id, so the schemas' "#/components/..." references resolve.
  ajv.addSchema({ $id: DOC_ID, components: doc.components });
  const validators = new Map<string, ValidateFunction>();
  const validatorFor = (schema: Schema): ValidateFunction => {
    const key = JSON.stringify(schema);
    let v = validators.get(key);
    if (!v) {
      v = ajv.compile({ $id: `${DOC_ID}/s${validators.size}`, ...rebase(schema) });
      validators.set(key, v);
    }
    return v;
  };
  const templates = Object.keys(doc.paths).map((template) => ({
    template,
    pattern: new RegExp(
      `^${API_BASE}${template.replace(/[.*+?^$()|[\]\\]/g, "\\$&").replace(/\{[^}]+\}/g, "[^/]+")}$`,
    ),
  }));

  const deref = (x: Schema): Schema => {
    const r = x.$ref;
    if (typeof r !== "string") return x;
    const parts = r.replace(/^#\//, "").split("/");
    let node: unknown = doc;
    for (const p of parts) node = (node as Record<string, unknown>)[p];
    if (!node) throw new Error(`unresolved reference ${r}`);
    return deref(node as Schema);
  };

  /** The problems with one response; empty when it matches the document. */
  function check(res: ApiResponse): string[] {
    const where = `${res.method} ${res.path} → ${res.status}`;
    const match = templates.find((t) => t.pattern.test(res.path));
    const item = match ? doc.paths[match.template] : undefined;
    const op = item?.[res.method.toLowerCase()] as Operation | undefined;
    if (!op) {
      // Not a described operation: only an error answer is acceptable.
      if (res.status < 400) return [`${where}: the operation is not described in the OpenAPI document`];
      return checkBody(where, res, { $ref: "#/components/schemas/Error" });
    }
    const responses = op.responses;
    const described =
      responses[String(res.status)] ?? responses[`${String(res.status)[0]}XX`] ?? responses.default;
    if (!described) return [`${where}: status ${res.status} is not among the operation's responses`];
    const response = deref(described);
    const content = response.content as Record<string, { schema: Schema }> | undefined;
    if (!content) {
      return res.body.length === 0
        ? []
        : [`${where}: the document describes no body, got ${res.body.length} bytes`];
    }
    // A text answer (the metrics' exposition): its media type, a string.
    if (content["text/plain"] && res.contentType?.startsWith("text/plain")) return [];
    const media = content["application/json"];
    if (!media) return [`${where}: no application/json content described`];
    return checkBody(where, res, media.schema);
  }

  function checkBody(where: string, res: ApiResponse, schema: Schema): string[] {
    if (!res.contentType?.startsWith("application/json")) {
      return [`${where}: content-type ${res.contentType} is not application/json`];
    }
    let body: unknown;
    try {
      body = JSON.parse(res.body);
    } catch {
      return [`${where}: the body is not JSON: ${res.body.slice(0, 200)}`];
    }
    const validate = validatorFor(schema);
    if (validate(body)) return [];
    return [`${where}: ${ajv.errorsText(validate.errors)}; body: ${JSON.stringify(body).slice(0, 500)}`];
  }

  return { check, doc };
}

/** The operations the document describes, as "METHOD /path". */
export function describedOperations(doc: OpenApiDoc): string[] {
  return Object.entries(doc.paths).flatMap(([path, item]) =>
    METHODS.filter((m) => m in item).map((m) => `${m.toUpperCase()} ${path}`),
  );
}

/** Local references of a schema point into the document registered under DOC_ID. */
function rebase(schema: Schema): Schema {
  return JSON.parse(JSON.stringify(schema), (k, v) =>
    k === "$ref" && typeof v === "string" && v.startsWith("#/") ? `${DOC_ID}${v}` : v,
  );
}

/** Whether a URL path belongs to the lease API. */
export function isApiPath(path: string): boolean {
  return path === API_BASE || path.startsWith(`${API_BASE}/`);
}
