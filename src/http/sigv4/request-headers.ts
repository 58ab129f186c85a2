/** Request headers as Node gives them (IncomingMessage.headers or headersDistinct). */
export type RequestHeaders = Readonly<Record<string, string | readonly string[] | undefined>>;

/** A header's single value; repeated headers are joined with "," as the canonical form does. */
export function headerValue(headers: RequestHeaders, name: string): string | undefined {
  const v = headers[name];
  if (v === undefined) return undefined;
  return typeof v === "string" ? v : v.join(",");
}
