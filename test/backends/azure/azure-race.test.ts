import { randomUUID } from "node:crypto";
import { setImmediate as tick } from "node:timers/promises";
import { expect, it } from "vitest";
import type { AzureBackend, AzureHooks } from "../../../src/backends/azure/index.js";
import { DomainError, StaleTokenError } from "../../../src/core/errors.js";
import { fencedCommit } from "../../../src/fence/commit.js";
import { metadataOf, readAll, sleep, verifiedBody } from "../../support/bodies.js";
import { azureFixture, useAzurite } from "./azure-fixture.js";

/**
 * Two independent AzureBackend clients (as two gateway replicas) on one container race commits,
 * deletes, re-creates (If-None-Match: *) and HCT raises on a few keys, with random delays at
 * every step of every write (after the body is staged, after the blob's properties are read,
 * before and after the conditional commit). Each round is 2-4 writes on the keys of its lane,
 * started together in a shuffled order with tokens handed out in increasing order; the delays
 * decide which commits first. Bodies longer than the (16 KiB) block size are staged as blocks,
 * so concurrent block lists collide too.
 *
 * Checked: the HCT of every key, sampled all along by a reader, never decreases and is always the
 * token of an accepted write; a refused write changes nothing (its body is never seen, and it was
 * refused only for a reason that holds: a higher HCT, an existing object, or a discarded staged
 * block list); at the end each key's HCT is the highest accepted token and its bytes are those of
 * the highest-token accepted write (or it is deleted).
 */

// In memory: this file makes thousands of writes, and Azurite's disk persistence is not what it tests.
const azurite = useAzurite({ inMemory: true });

const ROUNDS = Number(process.env.FENCEGATE_AZURE_RACE_ROUNDS ?? 1000);
/** Two lanes of rounds run side by side, each on its own keys: twice the rounds in the same time. */
const LANES = [
  ["race/a", "race/b"],
  ["race/\u{1F600}", "race/c"],
];
const KEYS = LANES.flat();

type Kind = "put" | "create" | "delete" | "raise";
type Op = { id: number; kind: Kind; key: string; token: number; client: number; body: string };

const jitter: AzureHooks = async () => {
  const r = Math.random();
  if (r < 0.4) return;
  if (r < 0.75) await tick();
  else await sleep(Math.random() * 4);
};

const isKind = (e: unknown, code: string) => e instanceof DomainError && e.code === code;

it(`keeps every fencing rule through ${ROUNDS} randomized interleavings of two clients`, async () => {
  const server = await azurite();
  // Small blocks: a quarter of the bodies are staged as blocks, so concurrent block lists collide.
  const options = { hooks: jitter, blockSizeBytes: 16 * 1024 };
  const fixtures = [await azureFixture(server, options), await azureFixture(server, options)];
  const clients: AzureBackend[] = fixtures.map((f) => f.backend);
  const bucket = `fg-race-${randomUUID().slice(0, 12)}`;
  await clients[0]!.createBucket(bucket);

  let nextToken = 0;
  let nextId = 0;
  const accepted: Op[] = [];
  const refused: Op[] = [];
  const reasons: Record<string, number> = {};
  const violations: string[] = [];
  const seenBodies = new Set<string>();
  const seenHcts: Array<{ key: string; hct: number }> = [];
  const lastHct = new Map<string, number>();

  const run = async (op: Op) => {
    const client = clients[op.client]!;
    const commit = fencedCommit(op.token, op.kind === "create" ? { conditions: { ifNoneMatch: "*" } } : {});
    switch (op.kind) {
      case "put":
      case "create": {
        const body = verifiedBody(op.body, {}, 4096);
        return client.putObject({ bucket, key: op.key, body, metadata: metadataOf() }, commit);
      }
      case "delete":
        return client.deleteObject({ bucket, key: op.key }, commit);
      case "raise":
        return client.raiseHighestToken(bucket, op.key, op.token);
    }
  };

  const newOp = (keys: string[]): Op => {
    const id = nextId++;
    const r = Math.random();
    const kind: Kind = r < 0.5 ? "put" : r < 0.7 ? "create" : r < 0.92 ? "delete" : "raise";
    const big = Math.random() < 0.25;
    // The body names its write; a big one is staged in blocks (the block size is 16 KiB).
    const body = `#${id}#`.padEnd(big ? 40 * 1024 : 64, ".");
    return {
      id,
      kind,
      key: keys[Math.floor(Math.random() * keys.length)]!,
      token: ++nextToken,
      client: id % 2,
      body,
    };
  };

  // The sampler: reads every key's HCT and bytes all along, through either client.
  let racing = true;
  const sampler = (async () => {
    let turn = 0;
    while (racing) {
      for (const key of KEYS) {
        const client = clients[turn++ % 2]!;
        const hct = await client.highestToken(bucket, key);
        if (hct !== null) {
          const previous = lastHct.get(key);
          if (previous !== undefined && hct < previous)
            violations.push(`HCT of ${key} went from ${previous} to ${hct}`);
          lastHct.set(key, hct);
          seenHcts.push({ key, hct });
        }
        // Bodies every few passes: HCT samples are what must be dense.
        if (turn % 4 !== 0) continue;
        try {
          const got = await client.getObject(bucket, key);
          const text = (await readAll(got.body)).toString();
          seenBodies.add(text.slice(0, text.indexOf("#", 1) + 1));
        } catch (e) {
          if (!isKind(e, "NoSuchKey")) violations.push(`GET ${key} failed: ${(e as Error).message}`);
        }
      }
      // A short pause between passes: samples stay dense without crowding out the writers.
      await sleep(5);
    }
  })();

  const record = (op: Op, outcome: PromiseSettledResult<unknown>) => {
    if (outcome.status === "fulfilled") {
      accepted.push(op);
      return;
    }
    refused.push(op);
    const e = outcome.reason as unknown;
    const reason = e instanceof DomainError ? e.code : "other";
    reasons[reason] = (reasons[reason] ?? 0) + 1;
    if (e instanceof StaleTokenError) {
      if (!(e.highestToken > op.token))
        violations.push(`#${op.id} refused as stale by HCT ${e.highestToken}`);
    } else if (isKind(e, "PreconditionFailed")) {
      if (op.kind !== "create")
        violations.push(`#${op.id} (${op.kind}) refused by a precondition it did not set`);
    } else if (!isKind(e, "SlowDown")) {
      violations.push(`#${op.id} (${op.kind}) failed: ${(e as Error).message}`);
    }
  };

  const lane = async (keys: string[], rounds: number) => {
    for (let round = 0; round < rounds; round++) {
      const ops = Array.from({ length: 2 + Math.floor(Math.random() * 3) }, () => newOp(keys));
      // Started in a shuffled order: a later token may start first.
      const shuffledOps = ops.sort(() => Math.random() - 0.5);
      const outcomes = await Promise.allSettled(shuffledOps.map(run));
      outcomes.forEach((outcome, i) => {
        record(shuffledOps[i]!, outcome);
      });
    }
  };

  const started = Date.now();
  await Promise.all(LANES.map((keys) => lane(keys, Math.ceil(ROUNDS / LANES.length))));
  racing = false;
  await sampler;
  const elapsed = Date.now() - started;

  const acceptedTokens = new Set(accepted.map((op) => `${op.key}@${op.token}`));
  for (const { key, hct } of seenHcts) {
    if (!acceptedTokens.has(`${key}@${hct}`))
      violations.push(`HCT ${hct} of ${key} is no accepted write's token`);
  }
  const acceptedBodies = new Set(
    accepted.filter((op) => op.kind === "put" || op.kind === "create").map((op) => `#${op.id}#`),
  );
  for (const seen of seenBodies) {
    if (!acceptedBodies.has(seen)) violations.push(`a reader saw ${seen}, which no accepted write wrote`);
  }

  for (const key of KEYS) {
    const onKey = accepted.filter((op) => op.key === key);
    const highest = Math.max(...onKey.map((op) => op.token));
    const hct = await clients[0]!.highestToken(bucket, key);
    if (hct !== highest)
      violations.push(`final HCT of ${key} is ${hct}, the highest accepted token ${highest}`);
    const lastWrite = onKey.filter((op) => op.kind !== "raise").sort((a, b) => b.token - a.token)[0];
    const current = await clients[1]!.getObject(bucket, key).then(
      async (got) => (await readAll(got.body)).toString(),
      (e: unknown) => (isKind(e, "NoSuchKey") ? null : Promise.reject(e)),
    );
    const expected = lastWrite === undefined || lastWrite.kind === "delete" ? null : lastWrite.body;
    if (current !== expected) {
      violations.push(`final bytes of ${key} are not those of #${lastWrite?.id} (token ${lastWrite?.token})`);
    }
  }

  for (const f of fixtures) await f.cleanup();
  console.log(
    `azure race: ${ROUNDS} rounds, ${accepted.length + refused.length} writes (${accepted.length} accepted, ${refused.length} refused: ${JSON.stringify(reasons)}), ${seenHcts.length} HCT samples in ${elapsed} ms`,
  );
  expect(violations).toEqual([]);
  // The race must really race: some writes are refused, many are accepted.
  expect(refused.length).toBeGreaterThan(ROUNDS / 10);
  expect(accepted.length).toBeGreaterThan(ROUNDS);
}, 120_000);
