import { luaFiles } from "../../../core/lua-source.js";
import { AUDIT_APPEND_LUA } from "../../../core/redis/audit-append.js";

const lua = luaFiles(import.meta.url);

/**
 * What every lease script starts with (prelude.lua, with the audit append put in at its
 * `--{{AUDIT_APPEND}}` line): the key layout, the clock, the token floor, lease records and the
 * overlap lookups. Every script is called with KEYS[1] = the key prefix P (it carries a hash tag,
 * so every key lives in one slot) and ARGV[1..2] = the caller's clock ('' = Redis's TIME) and the
 * retention of ended leases in ms. Script-specific arguments follow from ARGV[3].
 *
 * Key layout under P:
 * - `P:floor`  hash: `last` (the last token taken, epoch × 2^32 + counter), `epoch`, `runid`
 *              (the server's run id when the epoch was installed: a restart or a failover
 *              changes it, and the floor is then unknown until a new epoch is installed), `q`
 *              (the end of the quarantine after a loss of data, when one is configured);
 * - `P:clock`  the time high-water mark (ms): time never goes back for the leases;
 * - `P:lease:<id>` hash: id, b, k | p, o (owner), pr? (principal), tok, ttl, acq, exp, rel? (released
 *              at), end? (seen to end: released, or its expiry reported; it stays ended whatever
 *              the clock says later);
 * - `P:ok:<b>`, `P:op:<b>`  the keys / prefixes of the bucket's open leases (not seen to end), a lexicographic sorted set; `P:okl:<b>:<s>`, `P:opl:<b>:<s>` the
 *              open leases filed under key / prefix s, by token;
 * - `P:rk:<b>`, `P:rp:<b>`, `P:rkl:<b>:<s>`, `P:rpl:<b>:<s>`  the same for every remembered lease
 *              (findNewerOverlapping), until retention forgets it;
 * - `P:exp`    open leases by expiresAt (collectExpired, list); `P:forget` ended leases by the
 *              time retention forgets them;
 * - `P:dlg`, `P:dlgl:<id>`, `P:dlgr`  delegates (lease-scripts.ts);
 * - `P:intent:<id>` hash: b, k, lid, tok, at; `P:ik:<b>` the keys with intents (lexicographic),
 *              `P:ikl:<b>:<k>` the intent ids of one key.
 * <b> is the bucket prefixed with its length, so that no bucket/key pair reads as another.
 *
 * Lease events: when the audit log lives in the same Redis under the same prefix, the grant,
 * renew, release, break and expiry scripts append the records of the events they make
 * themselves, with the audit log's own Lua function (audit_append,
 * src/core/redis/audit-append.lua): a lease change and its record commit together or not at
 * all. Such a script takes an event
 * context after its own arguments (EVENT_ARGS); without one (the audit log is elsewhere), it
 * records nothing and the store records the events right after the script returns.
 */
export const PRELUDE = lua("prelude.lua", { AUDIT_APPEND: AUDIT_APPEND_LUA });

/** How many ARGV an event context takes (see events_from in the prelude). */
export const EVENT_ARGS = 5;
