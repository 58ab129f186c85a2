/**
 * Closed-loop load and the statistics the benchmarks report: `concurrency` clients each run `op`
 * back to back until the time is up; rounds alternate between targets and the medians are compared.
 */

export type Rate = { ops: number; seconds: number; perSecond: number };

export async function closedLoop(
  concurrency: number,
  seconds: number,
  op: (client: number, n: number) => Promise<unknown>,
): Promise<Rate> {
  let ops = 0;
  const start = performance.now();
  const deadline = start + seconds * 1000;
  await Promise.all(
    Array.from({ length: concurrency }, async (_, client) => {
      for (let n = 0; performance.now() < deadline; n++) {
        await op(client, n);
        ops++;
      }
    }),
  );
  const elapsed = (performance.now() - start) / 1000;
  return { ops, seconds: elapsed, perSecond: ops / elapsed };
}

export function median(values: readonly number[]): number {
  if (values.length === 0) return Number.NaN;
  const sorted = [...values].sort((a, b) => a - b);
  const mid = sorted.length >> 1;
  return sorted.length % 2 === 1 ? sorted[mid]! : (sorted[mid - 1]! + sorted[mid]!) / 2;
}

export function percentile(values: readonly number[], p: number): number {
  if (values.length === 0) return Number.NaN;
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.ceil((p / 100) * sorted.length) - 1)]!;
}

/**
 * Measures every target once per round, in an order that rotates from round to round (so that
 * no target always runs right after the same other one), and returns each target's medians.
 */
export async function alternate<T extends string>(
  targets: readonly T[],
  rounds: number,
  measure: (target: T, round: number) => Promise<number>,
): Promise<Record<T, { median: number; samples: number[] }>> {
  const samples = new Map<T, number[]>(targets.map((t) => [t, []]));
  for (let round = 0; round < rounds; round++) {
    const order = targets.map((_, i) => targets[(i + round) % targets.length]!);
    for (const target of order) samples.get(target)!.push(await measure(target, round));
  }
  const out = {} as Record<T, { median: number; samples: number[] }>;
  for (const [t, s] of samples) out[t] = { median: median(s), samples: s };
  return out;
}
