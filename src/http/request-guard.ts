import type { IncomingMessage, ServerResponse } from "node:http";
import { DomainError } from "../core/errors.js";
import type { Logger } from "../core/log.js";
import type { EdgeRenderer } from "./edge-answers.js";
import { lingerAfterEarlyAnswer } from "./lingering-close.js";
import { newRequestId } from "./request-id.js";

type RequestListener = (req: IncomingMessage, res: ServerResponse) => unknown;

let running: IncomingMessage | undefined;

/**
 * The request whose listener is running, during the listener's synchronous part only: for error
 * handlers that are called synchronously from it without being given the request (the HTTP
 * adapter's, when it cannot build a URL). A plain variable, not AsyncLocalStorage, which on
 * Node 20 puts a hook on every promise the process makes.
 */
export function currentRequest(): IncomingMessage | undefined {
  return running;
}

/** Headers whose repetition makes a request ambiguous; Node would keep the first silently. */
const SINGLETONS = ["host", "authorization"] as const;

/**
 * Refuses, before any routing, requests that Node accepts but no endpoint could answer honestly:
 * no Host header (Node's own answer to that is a bare 400), a repeated Host or Authorization,
 * and more headers than Node keeps (it drops the rest without a word, so what was signed and
 * what arrived could differ).
 */
export function guardRequests(
  listener: RequestListener,
  opts: { render: EdgeRenderer; maxHeadersCount: number; log: Logger },
): RequestListener {
  return (req, res) => {
    lingerAfterEarlyAnswer(req, res);
    const problem = requestProblem(req, opts.maxHeadersCount);
    if (problem) {
      const requestId = newRequestId();
      const answer = opts.render(problem, { target: req.url, host: req.headers.host }, requestId);
      opts.log.info({ code: problem.code, reason: problem.message }, "request refused before routing");
      res.writeHead(answer.status, {
        "content-type": answer.contentType,
        "content-length": Buffer.byteLength(answer.body),
        "x-amz-request-id": requestId,
        server: "fencegate",
        connection: "close",
      });
      res.end(answer.body);
      return;
    }
    const outer = running;
    running = req;
    try {
      return listener(req, res);
    } finally {
      running = outer;
    }
  };
}

function requestProblem(req: IncomingMessage, maxHeadersCount: number): DomainError | undefined {
  if (maxHeadersCount > 0 && req.rawHeaders.length / 2 >= maxHeadersCount) {
    return new DomainError(
      "RequestHeaderSectionTooLarge",
      `Your request has more header fields than the ${maxHeadersCount - 1} allowed.`,
    );
  }
  const counts = new Map<string, number>();
  for (let i = 0; i < req.rawHeaders.length; i += 2) {
    const name = req.rawHeaders[i]!.toLowerCase();
    if ((SINGLETONS as readonly string[]).includes(name)) counts.set(name, (counts.get(name) ?? 0) + 1);
  }
  for (const [name, n] of counts) {
    if (n > 1) return new DomainError("InvalidRequest", `The ${name} header must not be repeated.`);
  }
  if (!req.headers.host) {
    return new DomainError("InvalidRequest", "The request has no Host header.");
  }
  return undefined;
}
