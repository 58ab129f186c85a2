// What the token-epoch tests share: taking tokens through a gateway's lease API while Redis comes
// back, and the scenario every deployment must pass when Redis loses its data.
import { expect } from "vitest";
import { FenceApiError } from "../../src/client/errors.js";
import type { LeaseClient } from "../../src/client/lease-client.js";
import type { TestGateway } from "../support/gateway.js";
import type { RedisServer } from "../support/redis.js";
import { sleep } from "../support/wait.js";

/**
 * Grants and releases `n` leases on distinct keys through the gateway, and returns their tokens in
 * grant order. A 503 (Redis restarting, the gateway reconnecting) is retried for up to 20 s;
 * anything else fails the test.
 */
export async function grantTokens(
  gw: { leases: LeaseClient },
  tag: string,
  n: number,
  opts: { ttlMs?: number } = {},
): Promise<number[]> {
  const tokens: number[] = [];
  const deadline = Date.now() + 20_000;
  for (let i = 0; i < n; i++) {
    for (;;) {
      try {
        const lease = await gw.leases.acquire({
          bucket: "epochs",
          key: `${tag}/${i}`,
          ttlMs: opts.ttlMs ?? 60_000,
        });
        tokens.push(lease.token);
        await gw.leases.release(lease.leaseId);
        break;
      } catch (e) {
        if (!(e instanceof FenceApiError && e.status === 503) || Date.now() > deadline) throw e;
        await sleep(100);
      }
    }
  }
  return tokens;
}

/** The first error a grant through `gw` answers (no retry), or null when it was granted. */
export async function grantRefusal(gw: { leases: LeaseClient }, key: string): Promise<FenceApiError | null> {
  try {
    const lease = await gw.leases.acquire({ bucket: "epochs", key, ttlMs: 60_000 });
    await gw.leases.release(lease.leaseId);
    return null;
  } catch (e) {
    if (e instanceof FenceApiError) return e;
    throw e;
  }
}

/**
 * Kills a redis-server without persistence and starts it again on the same port: everything it
 * held is lost. Returns the new handle.
 */
export async function loseEverything(redis: RedisServer): Promise<RedisServer> {
  await redis.kill9();
  const restarted = await redis.restart();
  expect(await restarted.command("DBSIZE")).toBe(0);
  return restarted;
}

/**
 * Two replicas of one deployment: tokens through both, then `loseData` (Redis loses everything),
 * then tokens through both again, B first this time (B never created an epoch: with epochs kept
 * per replica it would start over at epoch 0 and repeat tokens 1, 2, ...). Every token ever
 * granted is distinct, each replica's grants strictly increase, and every token after the loss
 * is above every token before it.
 */
export async function tokensAcrossALoss(
  replicas: { a: TestGateway; b: TestGateway },
  loseData: () => Promise<void>,
  opts: { ttlMs?: number } = {},
): Promise<void> {
  const { a, b } = replicas;
  const byReplica = { a: [] as number[], b: [] as number[] };
  byReplica.a.push(...(await grantTokens(a, "a-before", 3, opts)));
  byReplica.b.push(...(await grantTokens(b, "b-before", 3, opts)));
  const before = [...byReplica.a, ...byReplica.b];

  await loseData();

  const afterB = await grantTokens(b, "b-after", 3, opts);
  const afterA = await grantTokens(a, "a-after", 3, opts);
  const afterBAgain = await grantTokens(b, "b-again", 2, opts);
  byReplica.a.push(...afterA);
  byReplica.b.push(...afterB, ...afterBAgain);
  const after = [...afterB, ...afterA, ...afterBAgain];

  expectNeverBack(byReplica, before, after);
}

/**
 * Every token ever granted is distinct, each replica's grants (in grant order) strictly increase,
 * and every token granted after a loss of Redis's data is above every token granted before it.
 */
export function expectNeverBack(
  byReplica: Record<string, number[]>,
  before: number[],
  after: number[],
): void {
  const all = [...before, ...after];
  expect(new Set(all).size, `a token repeats: ${all.join(", ")}`).toBe(all.length);
  for (const [name, tokens] of Object.entries(byReplica)) {
    for (let i = 1; i < tokens.length; i++) {
      expect(tokens[i]!, `replica ${name}: ${tokens.join(", ")}`).toBeGreaterThan(tokens[i - 1]!);
    }
  }
  expect(Math.min(...after), `before: ${before.join(", ")}; after: ${after.join(", ")}`).toBeGreaterThan(
    Math.max(...before),
  );
  for (const t of all) expect(Number.isSafeInteger(t)).toBe(true);
}
