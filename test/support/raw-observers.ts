/** What rawRequest (signed-http.ts) sent and received, for observers such as openapi-recorder.ts. */
export type ObservedExchange = {
  method: string;
  path: string;
  headers?: Record<string, string | string[]>;
  status: number;
  responseHeaders: Record<string, string | string[] | undefined>;
  text: string;
};

/** Called with every answer rawRequest receives. Kept apart so observers load nothing else. */
export const rawResponseObservers: Array<(exchange: ObservedExchange) => void> = [];
