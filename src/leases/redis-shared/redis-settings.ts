import { type Redis, ReplyError } from "ioredis";

/**
 * What the Redis lease store needs of the server it runs on, checked at start-up and on every
 * reconnect (a restarted or failed-over server may run with other settings).
 *
 * - unsafe: an eviction policy that can drop keys. Lease records carry a TTL (volatile-*) and
 *   every key is a candidate under allkeys-*: an evicted lease frees its resource while its holder
 *   still writes, so mutual exclusion no longer holds (tokens stay safe: the epoch covers a lost
 *   counter). With refusal on (the default), the store answers 503 while this holds.
 * - warnings: durability. Without AOF a restart loses every lease (holders get LeaseExpired and
 *   must acquire again); with appendfsync everysec up to a second of changes, and with no
 *   fsync policy whatever the OS had not written. Tokens never go back either way (the epoch).
 */
export type RedisSettingsReport = { unsafe: string[]; warnings: string[] };

export async function checkRedisSettings(redis: Redis): Promise<RedisSettingsReport> {
  const unsafe: string[] = [];
  const warnings: string[] = [];
  let config: Map<string, string>;
  try {
    const flat = (await redis.call("CONFIG", "GET", "*")) as string[];
    config = new Map();
    for (let i = 0; i + 1 < flat.length; i += 2) config.set(flat[i]!, flat[i + 1]!);
  } catch (e) {
    // A timeout or a lost connection says nothing about the settings: the caller tries again.
    if (!(e instanceof ReplyError)) throw e;
    // Managed services often disable CONFIG: say what could not be checked, and go on.
    warnings.push(
      `cannot read the Redis configuration (${(e as Error).message}); make sure maxmemory-policy is noeviction and appendonly yes with appendfsync always`,
    );
    return { unsafe, warnings };
  }
  const policy = config.get("maxmemory-policy") ?? "";
  const maxmemory = Number(config.get("maxmemory") ?? "0");
  if (policy !== "noeviction") {
    const problem = `maxmemory-policy is ${policy}: Redis may evict lease records and free a resource while its holder still writes; set maxmemory-policy noeviction`;
    if (maxmemory > 0) unsafe.push(problem);
    else warnings.push(`${problem} (no maxmemory is set, so nothing is evicted yet)`);
  }
  if (config.get("appendonly") !== "yes") {
    warnings.push(
      "appendonly is no: a Redis restart loses every lease (holders get LeaseExpired; tokens still never go back); set appendonly yes and appendfsync always",
    );
  } else if (config.get("appendfsync") !== "always") {
    warnings.push(
      `appendfsync is ${config.get("appendfsync")}: a crash loses the last changes (up to a second with everysec), so a lease just granted or renewed may be gone after a restart; set appendfsync always`,
    );
  }
  return { unsafe, warnings };
}
