import { AUDIT_APPEND_LUA } from "./audit-lua.js";
import { LuaScript } from "./lua-script.js";

/**
 * The audit log's own scripts. Each is called with KEYS[1] = the key prefix P; the keys they
 * touch are derived from it (they all carry P's hash tag, so they live in one slot).
 */

/** Append one record: ARGV = field, value, field, value, ... Returns the seq. */
export const APPEND = new LuaScript(
  "audit_append",
  `
local P = KEYS[1]
${AUDIT_APPEND_LUA}
-- A log whose counter is gone takes nothing until the gateway has restored it.
if not audit_ready() then return redis.error_reply('AUDITLOST the audit log counter is missing') end
local r = {}
for i = 1, #ARGV, 2 do r[ARGV[i]] = ARGV[i + 1] end
return audit_append(r)
`,
);

/**
 * Append one record unless one was appended under the same key already: ARGV[1] = the key,
 * ARGV[2] = how long the key is kept (s), then field, value pairs. Returns the seq, or 0.
 */
export const APPEND_ONCE = new LuaScript(
  "audit_append_once",
  `
local P = KEYS[1]
${AUDIT_APPEND_LUA}
if not audit_ready() then return redis.error_reply('AUDITLOST the audit log counter is missing') end
if not redis.call('SET', P .. ':a:once:' .. ARGV[1], '1', 'NX', 'EX', tonumber(ARGV[2])) then return 0 end
local r = {}
for i = 3, #ARGV, 2 do r[ARGV[i]] = ARGV[i + 1] end
return audit_append(r)
`,
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
export const QUERY = new LuaScript(
  "audit_query",
  `
local A = KEYS[1] .. ':a'
local after = tonumber(ARGV[1])
local fetch = tonumber(ARGV[2])
local budget = tonumber(ARGV[3])
local since = nil
if ARGV[4] ~= '' then since = tonumber(ARGV[4]) end
local untl = nil
if ARGV[5] ~= '' then untl = tonumber(ARGV[5]) end
local prefix = nil
if ARGV[6] ~= '' then prefix = ARGV[6] end
-- The record field each index name filters on.
local FIELD = {b = 'b', k = 'k', l = 'lid', d = 'd', o = 'op', tx = 'tx'}
local eq = {}
for i = 7, #ARGV, 2 do eq[#eq + 1] = {ARGV[i], ARGV[i + 1]} end
-- More names than this under a prefix: reading their indexes side by side costs more
-- than reading the log itself.
local MAX_MERGE = 256

local function seq_of(id) return tonumber(string.sub(id, 3)) end
-- Indexes that are sorted sets of seqs; the others are streams with the log's ids.
local ZSET = {k = true, p = true, l = true, tx = true}
local function index_len(ix)
  if ZSET[ix[1]] then return redis.call('ZCARD', ix[2]) end
  return redis.call('XLEN', ix[2])
end
-- The seqs in an index after 'from' up to 'to', at most 'count' of them, in order.
local function index_read(ix, from, to, count)
  local out = {}
  if ZSET[ix[1]] then
    for i, m in ipairs(redis.call('ZRANGEBYSCORE', ix[2], '(' .. from, to, 'LIMIT', 0, count)) do
      out[i] = tonumber(m)
    end
  else
    for i, e in ipairs(redis.call('XRANGE', ix[2], '(0-' .. from, '0-' .. to, 'COUNT', count)) do
      out[i] = seq_of(e[1])
    end
  end
  return out
end
local function fields(flat)
  local f = {}
  for i = 1, #flat, 2 do f[flat[i]] = flat[i + 1] end
  return f
end

-- Records up to 'archived' are in the archive, not here: the caller reads them there.
local archived = tonumber(redis.call('GET', A .. ':archived') or '0')
local lo = math.max(after, archived)
local last_entry = redis.call('XREVRANGE', A, '+', '-', 'COUNT', 1)[1]
if last_entry == nil then return {'end', lo, archived} end
local hi = seq_of(last_entry[1])

-- The first seq at or after p whose record has h >= bound (h never decreases along the log),
-- or hi + 1: a binary search, each probe one seek in the stream.
local function first_h_at_least(bound, p)
  local l, r = p, hi + 1
  while l < r do
    local mid = math.floor((l + r) / 2)
    local e = redis.call('XRANGE', A, '0-' .. mid, '+', 'COUNT', 1)[1]
    if e == nil or tonumber(fields(e[2]).h) >= bound then r = mid else l = mid + 1 end
  end
  return l
end
-- A time window as a seq range: a record with time t has h - lag <= t <= h. Records before
-- the first with h >= since are all older than since; records from the first with
-- h >= until + lag on are all at or after until.
if since ~= nil then lo = math.max(lo, first_h_at_least(since, lo + 1) - 1) end
if untl ~= nil then
  local lag = tonumber(redis.call('GET', A .. ':lag') or '0')
  hi = math.min(hi, first_h_at_least(untl + lag, lo + 1) - 1)
end
if lo >= hi then return {'end', hi, archived} end

local function matches(f)
  for _, e in ipairs(eq) do
    if f[FIELD[e[1]]] ~= e[2] then return false end
  end
  if prefix ~= nil then
    local k, p = f.k, f.p
    if not ((k ~= nil and string.sub(k, 1, #prefix) == prefix) or (p ~= nil and string.sub(p, 1, #prefix) == prefix)) then
      return false
    end
  end
  local t = tonumber(f.t)
  if since ~= nil and t < since then return false end
  if untl ~= nil and t >= untl then return false end
  return true
end

-- The driver: the smallest of the log's range, each equality filter's index, and the indexes
-- of the names under the prefix. Every other filter is checked on its records.
local driver = nil
local size = hi - lo
local eqix, driven = {}, nil
for i, e in ipairs(eq) do
  local ix = {e[1], A .. ':x:' .. e[1] .. ':' .. e[2], 0}
  ix[3] = index_len(ix)
  eqix[i] = ix
  -- An index that does not exist: nothing can match.
  if ix[3] == 0 then return {'end', hi, archived} end
  if ix[3] < size then driver, size, driven = {ix}, ix[3], i end
end
if prefix ~= nil then
  local from, to = '[' .. prefix, '(' .. prefix .. '\\255'
  local names = redis.call('ZRANGEBYLEX', A .. ':n:k', from, to, 'LIMIT', 0, MAX_MERGE + 1)
  local pnames = redis.call('ZRANGEBYLEX', A .. ':n:p', from, to, 'LIMIT', 0, MAX_MERGE + 1)
  if #names + #pnames == 0 then return {'end', hi, archived} end
  if #names + #pnames <= MAX_MERGE then
    local ixs, n = {}, 0
    for _, s in ipairs(names) do ixs[#ixs + 1] = {'k', A .. ':x:k:' .. s} end
    for _, s in ipairs(pnames) do ixs[#ixs + 1] = {'p', A .. ':x:p:' .. s} end
    for _, ix in ipairs(ixs) do n = n + index_len(ix) end
    if n < size then driver, size, driven = ixs, n, nil end
  end
end
-- The equality filters the driver does not answer by itself: checked on their own indexes
-- before a record is read, so that a record is fetched only when it can match.
local others = {}
local examined = 0
for i, ix in ipairs(eqix) do
  if i ~= driven then others[#others + 1] = ix end
end
local log_len = math.max(1, redis.call('XLEN', A))
local function prefilter(ids)
  local keep = ids
  for _, ix in ipairs(others) do
    if #keep == 0 then return keep end
    local next_keep = {}
    if ZSET[ix[1]] then
      examined = examined + #keep / 4
      for _, s in ipairs(keep) do
        if redis.call('ZSCORE', ix[2], s) then next_keep[#next_keep + 1] = s end
      end
    elseif (keep[#keep] - keep[1]) * ix[3] / log_len <= 32 * #keep then
      -- A stream read in order over the candidates' span, when that span holds few entries.
      local have, from = {}, keep[1] - 1
      while true do
        local got = index_read(ix, from, keep[#keep], 1000)
        examined = examined + #got / 10
        for _, s in ipairs(got) do have[s] = true end
        if #got < 1000 then break end
        from = got[#got]
      end
      for _, s in ipairs(keep) do
        if have[s] then next_keep[#next_keep + 1] = s end
      end
    else
      examined = examined + #keep
      for _, s in ipairs(keep) do
        if #redis.call('XRANGE', ix[2], '0-' .. s, '0-' .. s) > 0 then next_keep[#next_keep + 1] = s end
      end
    end
    keep = next_keep
  end
  return keep
end

local out = {'full', 0, archived}
local found = 0
local function take(id, f)
  if matches(f) then
    out[#out + 1] = {id, f}
    found = found + 1
  end
  return found >= fetch
end
local BATCH = math.min(math.max(fetch, 64), 512)
local pos = lo
local function flat(f)
  local a = {}
  for k, v in pairs(f) do a[#a + 1] = k; a[#a + 1] = v end
  return a
end
local function finish(state)
  out[1] = state
  out[2] = pos
  for i = 4, #out do out[i] = {out[i][1], flat(out[i][2])} end
  return out
end

if driver == nil then
  -- The log itself, in seq order: each entry is its own record.
  while true do
    local es = redis.call('XRANGE', A, '(0-' .. pos, '0-' .. hi, 'COUNT', BATCH)
    for _, e in ipairs(es) do
      pos = seq_of(e[1])
      examined = examined + 1
      if take(e[1], fields(e[2])) then return finish('full') end
    end
    if #es < BATCH then pos = hi; return finish('end') end
    if examined >= budget then return finish('budget') end
  end
end

-- One or more indexes merged in seq order. An index that filled its batch is known only up to
-- its last seq: seqs beyond the smallest such bound wait for the next round, so that no seq of
-- another index below them is passed over.
while true do
  local ids, seen = {}, {}
  local bound = hi
  for _, ix in ipairs(driver) do
    local got = index_read(ix, pos, hi, BATCH)
    for _, s in ipairs(got) do
      if not seen[s] then seen[s] = true; ids[#ids + 1] = s end
    end
    if #got == BATCH then bound = math.min(bound, got[#got]) end
  end
  table.sort(ids)
  local upto = {}
  for _, s in ipairs(ids) do
    if s <= bound then upto[#upto + 1] = s end
  end
  examined = examined + #upto
  for _, s in ipairs(prefilter(upto)) do
    local e = redis.call('XRANGE', A, '0-' .. s, '0-' .. s)[1]
    examined = examined + 1
    pos = s
    -- An index entry whose record is gone (archived meanwhile cannot happen in one script;
    -- this only guards against a hand-edited log) is skipped.
    if e ~= nil and take(e[1], fields(e[2])) then return finish('full') end
  end
  pos = bound
  if pos >= hi then return finish('end') end
  if examined >= budget then return finish('budget') end
end
`,
);

/**
 * Move records (after, last] out of Redis once their archive segment is durable.
 * ARGV: expected archived seq, last seq of the segment, segment description (JSON).
 * Returns 1, or 0 when another gateway archived first (`P:a:archived` moved on).
 */
export const TRIM = new LuaScript(
  "audit_trim",
  `
local A = KEYS[1] .. ':a'
local expected = tonumber(ARGV[1])
local last = tonumber(ARGV[2])
-- Only the archiver that read the log from where the archive ended may move it on: two
-- gateways racing for the same records register one segment, never two overlapping ones.
if tonumber(redis.call('GET', A .. ':archived') or '0') ~= expected then return 0 end
-- The indexes holding the records being moved, read from the records themselves.
local INDEX = {b = 'b', k = 'k', p = 'p', lid = 'l', d = 'd', op = 'o', tx = 'tx'}
local keys = {}
local pos = expected
while true do
  local es = redis.call('XRANGE', A, '(0-' .. pos, '0-' .. last, 'COUNT', 1000)
  for _, e in ipairs(es) do
    local f = e[2]
    for i = 1, #f, 2 do
      local name = INDEX[f[i]]
      if name ~= nil then keys[A .. ':x:' .. name .. ':' .. f[i + 1]] = {name, f[i + 1]} end
    end
    pos = tonumber(string.sub(e[1], 3))
  end
  if #es < 1000 then break end
end
-- Register the segment and the new archive mark first, in this same script: a query sees
-- every record either here or in a registered segment, never in neither.
redis.call('ZADD', A .. ':seg', last, ARGV[3])
redis.call('SET', A .. ':archived', last)
local min = '0-' .. string.format('%.0f', last + 1)
redis.call('XTRIM', A, 'MINID', min)
for key, what in pairs(keys) do
  local left
  if what[1] == 'k' or what[1] == 'p' or what[1] == 'l' or what[1] == 'tx' then
    -- A sorted set of seqs; Redis deletes it when it becomes empty.
    redis.call('ZREMRANGEBYSCORE', key, '-inf', string.format('%.0f', last))
    left = redis.call('ZCARD', key)
  else
    redis.call('XTRIM', key, 'MINID', min)
    left = redis.call('XLEN', key)
    if left == 0 then redis.call('DEL', key) end
  end
  -- A key or prefix with nothing left in its index is no longer found under its name.
  if left == 0 and (what[1] == 'k' or what[1] == 'p') then
    redis.call('ZREM', A .. ':n:' .. what[1], what[2])
  end
end
return 1
`,
);

/**
 * Creates the log's counter when it is missing: at the first start of a deployment, or after
 * Redis lost its data. ARGV: the floor (no seq at or below it is given out again: the highest
 * seq in the archive, or seen by this gateway), then descriptions (JSON) of archive segments to
 * register again, each followed by its last seq, in order. Returns 1 if it created the counter,
 * 0 if the counter was there (nothing changed).
 */
export const RESTORE = new LuaScript(
  "audit_restore",
  `
local A = KEYS[1] .. ':a'
if redis.call('EXISTS', A .. ':seq') == 1 then return 0 end
local floor = tonumber(ARGV[1])
local archived = 0
for i = 2, #ARGV, 2 do
  redis.call('ZADD', A .. ':seg', ARGV[i + 1], ARGV[i])
  archived = tonumber(ARGV[i + 1])
end
-- Records of the lost state are gone; what the archive holds is still answered.
if archived > 0 then redis.call('SET', A .. ':archived', archived) end
redis.call('SET', A .. ':seq', string.format('%.0f', math.max(floor, archived)))
return 1
`,
);

/** Releases the archiver's lock only if this gateway still holds it. ARGV: its token. */
export const UNLOCK = new LuaScript(
  "audit_unlock",
  `
local key = KEYS[1] .. ':a:archiver'
if redis.call('GET', key) == ARGV[1] then return redis.call('DEL', key) end
return 0
`,
);
