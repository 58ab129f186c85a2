import { LuaScript, luaFiles } from "../../core/lua-source.js";
import { AUDIT_APPEND_LUA } from "../../core/redis/audit-append.js";

const lua = luaFiles(import.meta.url);

/**
 * The audit log's own scripts. Each is called with KEYS[1] = the key prefix P; the keys they
 * touch are derived from it (they all carry P's hash tag, so they live in one slot).
 */

/** Append one record: ARGV = field, value, field, value, ... Returns the seq. */
export const APPEND = new LuaScript(
  "audit_append",
  lua("lua/append.lua", { AUDIT_APPEND: AUDIT_APPEND_LUA }),
);

/**
 * Append one record unless one was appended under the same key already: ARGV[1] = the key,
 * ARGV[2] = how long the key is kept (s), then field, value pairs. Returns the seq, or 0.
 */
export const APPEND_ONCE = new LuaScript(
  "audit_append_once",
  lua("lua/append-once.lua", { AUDIT_APPEND: AUDIT_APPEND_LUA }),
);

/**
 * One page of a query, read in one script so that it sees one state of the log (several index
 * streams read in one script cannot disagree about what was appended between them).
 *
 * ARGV: after (seq, exclusive), fetch (matches wanted), budget (work at most: a unit per record
 * read, index entry considered or looked up, less for the cheaper reads that check a filter),
 * since ms or '', until ms or '', prefix or '', then index name, value pairs (equality filters).
 *
 * Returns {state, position, archived, matches...}: state 'full' (fetch matches found), 'end'
 * (nothing more in the range) or 'budget' (stopped once the work reached `budget`: everything
 * up to `position` was examined); `archived` is the last seq already moved to the archive (this
 * read started after it); each match is {id, fields}.
 */
export const QUERY = new LuaScript("audit_query", lua("lua/query.lua"));

/**
 * Move records (after, last] out of Redis once their archive segment is durable.
 * ARGV: expected archived seq, last seq of the segment, segment description (JSON).
 * Returns 1, or 0 when another gateway archived first (`P:a:archived` moved on).
 */
export const TRIM = new LuaScript("audit_trim", lua("lua/trim.lua"));

/**
 * Creates the log's counter when it is missing: at the first start of a deployment, or after
 * Redis lost its data. ARGV: the floor (no seq at or below it is given out again: the highest
 * seq in the archive, or seen by this gateway), then descriptions (JSON) of archive segments to
 * register again, each followed by its last seq, in order. Returns 1 if it created the counter,
 * 0 if the counter was there (nothing changed).
 */
export const RESTORE = new LuaScript("audit_restore", lua("lua/restore.lua"));

/** Releases the archiver's lock only if this gateway still holds it. ARGV: its token. */
export const UNLOCK = new LuaScript("audit_unlock", lua("lua/unlock.lua"));
