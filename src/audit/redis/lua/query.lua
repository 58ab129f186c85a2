
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
  local from, to = '[' .. prefix, '(' .. prefix .. '\255'
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
