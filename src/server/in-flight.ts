import type { IncomingMessage, Server, ServerResponse } from "node:http";

/** An answer written straight to the socket (not through the app). */
export type RawAnswer = { status: number; headers: Record<string, string | number>; body: string };

/**
 * The requests a server is answering, for a shutdown with a bound: it waits for them to finish,
 * then answers those still running itself and lets their handlers' own answers go nowhere.
 */
export class InFlight {
  private readonly responses = new Set<ServerResponse>();
  private readonly cut = new WeakSet<ServerResponse>();
  private emptied: (() => void) | undefined;

  constructor(server: Server) {
    server.on("request", (_req: IncomingMessage, res: ServerResponse) => {
      this.responses.add(res);
      res.once("close", () => {
        this.responses.delete(res);
        if (this.responses.size === 0) this.emptied?.();
      });
    });
  }

  get size(): number {
    return this.responses.size;
  }

  /** Resolves once no request is in flight, or after `ms`, whichever comes first. */
  drained(ms: number): Promise<void> {
    if (this.responses.size === 0 || ms <= 0) return Promise.resolve();
    return new Promise((resolve) => {
      const done = () => {
        clearTimeout(timer);
        this.emptied = undefined;
        resolve();
      };
      const timer = setTimeout(done, ms);
      this.emptied = done;
    });
  }

  /** Whether `res` was answered by cutOff: its handler's own answer must not be sent. */
  wasCut(res: ServerResponse): boolean {
    return this.cut.has(res);
  }

  /**
   * Answers every request still running whose answer has not started with `answer(req)`, and
   * closes the connection of those whose answer has (a body cut short). Resolves once the answers
   * are written, or after `flushMs`.
   */
  async cutOff(answer: (req: IncomingMessage) => RawAnswer, flushMs: number): Promise<void> {
    const written: Promise<void>[] = [];
    for (const res of this.responses) {
      this.cut.add(res);
      if (res.headersSent || res.writableEnded) {
        res.destroy();
        continue;
      }
      const a = answer(res.req);
      res.writeHead(a.status, {
        ...a.headers,
        "content-length": Buffer.byteLength(a.body),
        connection: "close",
      });
      written.push(new Promise((resolve) => res.end(a.body, () => resolve())));
    }
    if (written.length === 0) return;
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([
      Promise.all(written),
      new Promise<void>((resolve) => {
        timer = setTimeout(resolve, flushMs);
      }),
    ]);
    clearTimeout(timer);
  }
}
