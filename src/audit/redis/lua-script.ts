import type { Redis } from "ioredis";

/**
 * A named Lua script, loaded into Redis once (SCRIPT LOAD) and called by its SHA1 (EVALSHA).
 * A Redis that restarted or ran SCRIPT FLUSH answers NOSCRIPT: the script is loaded again and
 * the call repeated once, which is safe because a NOSCRIPT call ran nothing.
 */
export class LuaScript {
  private sha: string | undefined;

  constructor(
    readonly name: string,
    readonly source: string,
  ) {}

  async load(redis: Redis): Promise<string> {
    this.sha = (await redis.script("LOAD", this.source)) as string;
    return this.sha;
  }

  async run(redis: Redis, keys: readonly string[], args: ReadonlyArray<string | number>): Promise<unknown> {
    const sha = this.sha ?? (await this.load(redis));
    try {
      return await redis.evalsha(sha, keys.length, ...keys, ...args);
    } catch (e) {
      if (!(e instanceof Error) || !e.message.startsWith("NOSCRIPT")) throw e;
      return redis.evalsha(await this.load(redis), keys.length, ...keys, ...args);
    }
  }
}
