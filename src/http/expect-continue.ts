import type { IncomingMessage, Server, ServerResponse } from "node:http";

const PENDING = Symbol("fencegate.continuePending");

/**
 * `Expect: 100-continue`: the request is handled at once, and "100 Continue" is sent only when
 * something starts reading the body. A write refused before that (no token, a stale token, a
 * missing bucket) is answered without the client ever sending its body.
 */
export function installExpectContinue(server: Server): void {
  server.on("checkContinue", (req: IncomingMessage, res: ServerResponse) => {
    (req as IncomingMessage & { [PENDING]?: ServerResponse })[PENDING] = res;
    server.emit("request", req, res);
  });
}

/** Tells a client waiting on Expect: 100-continue to send its body; a no-op otherwise. */
export function continueBody(req: IncomingMessage): void {
  const r = req as IncomingMessage & { [PENDING]?: ServerResponse };
  const res = r[PENDING];
  if (!res) return;
  r[PENDING] = undefined;
  if (!res.headersSent) res.writeContinue();
}
