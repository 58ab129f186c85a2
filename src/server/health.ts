import type { Health, HealthReport } from "../api/lease-api.js";

/** Something the gateway needs in order to serve: a backend, the lease store, the audit log. */
export type Dependency = {
  /** How health names it: `backend`, `backends.<name>`, `leaseStore`, `auditLog`. */
  name: string;
  kind: string;
  /** Resolves when the dependency answers; rejects with what went wrong. */
  check: () => Promise<unknown>;
};

type CheckResult = {
  kind: string;
  status: "ok" | "unavailable" | "timeout";
  ms: number;
  error?: string;
};

type HealthOptions = {
  dependencies: Dependency[];
  /** Every check gets this long; one that has not answered by then is reported as down. */
  timeoutMs: number;
  /** Fields every answer carries (the gateway id, the kinds of its stores). */
  describe: Record<string, string>;
  /** Set once the gateway is shutting down: readiness then fails with this reason. */
  draining: () => string | null;
  /** Told of every readiness check's results (metrics). */
  onReport?: (checks: Record<string, CheckResult>) => void;
};

type Outcome = { ok: true } | { ok: false; error: string };

/**
 * Health and readiness within a deadline: every dependency is checked in parallel and the answer
 * is given when all have answered or the deadline is up, whichever comes first; a dependency
 * still silent then is reported as such, never waited for. A check still running from an earlier
 * request is joined rather than started again, so that a silent store does not collect one
 * pending call per health poll.
 */
export function createHealth(opts: HealthOptions): Health {
  const running = new Map<string, Promise<Outcome>>();
  const probe = (dep: Dependency): Promise<Outcome> => {
    let pending = running.get(dep.name);
    if (!pending) {
      pending = Promise.resolve()
        .then(dep.check)
        .then(
          (): Outcome => ({ ok: true }),
          (e: unknown): Outcome => ({ ok: false, error: (e as Error)?.message ?? String(e) }),
        )
        .finally(() => running.delete(dep.name));
      running.set(dep.name, pending);
    }
    return pending;
  };

  return {
    live: () => ({ status: "ok", ...opts.describe }),

    async ready(): Promise<HealthReport> {
      const draining = opts.draining();
      if (draining !== null) {
        return {
          ok: false,
          body: { status: "unavailable", error: draining, draining: true, ...opts.describe },
        };
      }
      const started = performance.now();
      let timer: NodeJS.Timeout | undefined;
      const deadline = new Promise<"timeout">((resolve) => {
        timer = setTimeout(() => resolve("timeout"), opts.timeoutMs);
      });
      const checks: Record<string, CheckResult> = {};
      try {
        await Promise.all(
          opts.dependencies.map(async (dep) => {
            const outcome = await Promise.race([probe(dep), deadline]);
            const ms = Math.round(performance.now() - started);
            checks[dep.name] =
              outcome === "timeout"
                ? {
                    kind: dep.kind,
                    status: "timeout",
                    ms,
                    error: `no answer within ${opts.timeoutMs} ms`,
                  }
                : outcome.ok
                  ? { kind: dep.kind, status: "ok", ms }
                  : { kind: dep.kind, status: "unavailable", ms, error: outcome.error };
          }),
        );
      } finally {
        clearTimeout(timer);
      }
      opts.onReport?.(checks);
      const failing = opts.dependencies.map((d) => d.name).filter((name) => checks[name]!.status !== "ok");
      if (failing.length === 0) return { ok: true, body: { status: "ok", ...opts.describe, checks } };
      const reasons = failing.map((name) => `${name} (${checks[name]!.kind}): ${checks[name]!.error}`);
      return {
        ok: false,
        body: { status: "unavailable", error: reasons.join("; "), failing, ...opts.describe, checks },
      };
    },
  };
}
