/**
 * The operation label of a lease API request: the operationId of the OpenAPI path it matches
 * (`acquireLease`, `renewLease`, ...), never the raw path (lease ids would make every request a
 * series of its own). A request that matches none is `api_unknown`.
 */
type OperationMatcher = (method: string, path: string) => string;

type OpenApiDoc = { paths: Record<string, object> };

export function apiOperations(doc: OpenApiDoc, base: string): OperationMatcher {
  const routes = Object.entries(doc.paths).flatMap(([template, methods]) => {
    const segments = template.split("/").filter((s) => s !== "");
    return Object.entries(methods as Record<string, { operationId?: unknown }>).flatMap(([method, op]) =>
      typeof op?.operationId === "string"
        ? [{ method: method.toUpperCase(), segments, operationId: op.operationId }]
        : [],
    );
  });
  return (method, path) => {
    if (!path.startsWith(base)) return "api_unknown";
    const segments = path
      .slice(base.length)
      .split("/")
      .filter((s) => s !== "");
    const wanted = method === "HEAD" ? "GET" : method;
    for (const route of routes) {
      if (route.method !== wanted || route.segments.length !== segments.length) continue;
      if (route.segments.every((s, i) => s.startsWith("{") || s === segments[i])) return route.operationId;
    }
    return "api_unknown";
  };
}
