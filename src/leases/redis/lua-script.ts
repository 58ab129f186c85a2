import { createHash } from "node:crypto";
import type { Redis } from "ioredis";

/**
 * A named Lua script, loaded once and called by its SHA1 (EVALSHA). A server that does not know
 * it (restarted, failed over, SCRIPT FLUSH) answers NOSCRIPT: the script is loaded again and the
 * call repeated, once. Nothing ran on the NOSCRIPT answer, so repeating it is safe.
 */
export class LuaScript {
  readonly sha: string;

  constructor(
    readonly name: string,
    readonly source: string,
  ) {
    this.sha = createHash("sha1").update(source).digest("hex");
  }

  async load(redis: Redis): Promise<void> {
    const sha = await redis.script("LOAD", this.source);
    if (sha !== this.sha) throw new Error(`script ${this.name}: Redis answered SHA ${String(sha)}`);
  }

  async run(redis: Redis, keys: readonly string[], args: readonly (string | number)[]): Promise<unknown> {
    try {
      return await redis.evalsha(this.sha, keys.length, ...keys, ...args);
    } catch (e) {
      if (!(e instanceof Error) || !e.message.startsWith("NOSCRIPT")) throw e;
      await this.load(redis);
      return await redis.evalsha(this.sha, keys.length, ...keys, ...args);
    }
  }
}
