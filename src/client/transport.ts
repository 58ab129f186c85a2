/**
 * How FenceClient sends a signed request: `fetchTransport` (the default, Node's fetch) or
 * `nodeHttpTransport` (node:http / node:https, no keep-alive), which the command line uses
 * because it starts faster than fetch. Applications may pass their own (a proxy, a test double).
 */
export type TransportRequest = {
  method: string;
  url: URL;
  headers: Record<string, string>;
  body?: string;
  signal: AbortSignal;
};

export type TransportResponse = {
  status: number;
  statusText: string;
  /** A response header by its (case-insensitive) name. */
  header(name: string): string | undefined;
  text: string;
};

/**
 * Sends one request and reads its whole answer. A failure to connect or read rejects with the
 * underlying error (its `code`, or its `cause.code`, e.g. ECONNREFUSED, tells whether the
 * request was sent).
 */
export type Transport = (req: TransportRequest) => Promise<TransportResponse>;

export const fetchTransport: Transport = async (req) => {
  const res = await fetch(req.url, {
    method: req.method,
    headers: req.headers,
    body: req.body,
    signal: req.signal,
  });
  const text = await res.text();
  return {
    status: res.status,
    statusText: res.statusText,
    header: (name) => res.headers.get(name) ?? undefined,
    text,
  };
};

export const nodeHttpTransport: Transport = async (req) => {
  const mod = req.url.protocol === "https:" ? await import("node:https") : await import("node:http");
  return new Promise<TransportResponse>((resolve, reject) => {
    const headers: Record<string, string> = { ...req.headers, connection: "close" };
    if (req.body !== undefined) headers["content-length"] = String(Buffer.byteLength(req.body));
    const request = mod.request(req.url, { method: req.method, headers, signal: req.signal }, (res) => {
      const chunks: Buffer[] = [];
      res.on("data", (c: Buffer) => chunks.push(c));
      res.on("error", reject);
      res.on("end", () =>
        resolve({
          status: res.statusCode ?? 0,
          statusText: res.statusMessage ?? "",
          header: (name) => {
            const v = res.headers[name.toLowerCase()];
            return Array.isArray(v) ? v.join(", ") : v;
          },
          text: Buffer.concat(chunks).toString("utf8"),
        }),
      );
    });
    request.on("error", reject);
    request.end(req.body);
  });
};
