
local P = KEYS[1]
local GIVEN_NOW = ARGV[1]
local RETAIN = tonumber(ARGV[2])
-- Redis's TTL on a lease record outlives retention by this much: the sweep forgets it first,
-- the TTL only catches what no sweep reached.
local MARGIN = 3600000
local EPOCH_SPAN = 4294967296

-- Numbers leave Lua only through this: tostring would round integers above 10^14.
local function fmt(n) return string.format('%.0f', n) end
local function bk(b) return #b .. ':' .. b end

-- One clock for every replica: Redis's TIME (or the caller's, in tests), never behind the
-- high-water mark, so that a clock stepping back cannot revive an ended lease.
local function clock(write)
  local t
  if GIVEN_NOW ~= '' then
    t = tonumber(GIVEN_NOW)
  else
    local tt = redis.call('TIME')
    t = tonumber(tt[1]) * 1000 + math.floor(tonumber(tt[2]) / 1000)
  end
  local hwm = tonumber(redis.call('GET', P .. ':clock') or '0')
  if t < hwm then return hwm end
  if write and t > hwm then redis.call('SET', P .. ':clock', fmt(t)) end
  return t
end

-- The token floor is known only while the epoch installed in this server's own lifetime holds:
-- a restart, a failover to a replica or a flush changes the run id or drops P:floor, and
-- counters may then be behind tokens already granted.
local function current_runid()
  return string.match(redis.call('INFO', 'server'), 'run_id:(%x+)')
end
local function floor_known()
  local f = redis.call('HMGET', P .. ':floor', 'runid', 'last', 'epoch')
  if not f[1] or not f[2] or f[1] ~= current_runid() then return nil end
  return tonumber(f[2]), tonumber(f[3])
end
-- Takes the next token (grants and fences alike); nil while the floor is unknown or when the
-- epoch's counter is used up: the caller then installs a new epoch and tries again.
local function take_token()
  local last, epoch = floor_known()
  if not last then return nil end
  if last + 1 >= (epoch + 1) * EPOCH_SPAN then return nil end
  return redis.call('HINCRBY', P .. ':floor', 'last', 1)
end

-- After Redis lost its data, leases granted before the loss may still be held: with a quarantine
-- configured, nothing that relies on knowing them (a grant, an unfenced write) goes ahead before
-- it ends. Answers the instant it ends, or nil.
local function quarantined(now)
  local q = tonumber(redis.call('HGET', P .. ':floor', 'q') or '0')
  if now < q then return q end
  return nil
end

local LEASE = P .. ':lease:'
local function lease(id)
  local raw = redis.call('HGETALL', LEASE .. id)
  if #raw == 0 then return nil end
  local l = {raw = raw}
  for i = 1, #raw, 2 do l[raw[i]] = raw[i + 1] end
  l.tok = tonumber(l.tok)
  l.exp = tonumber(l.exp)
  return l
end
local function is_open(l) return l['end'] == nil end
local function is_active(l, now) return is_open(l) and l.exp > now end

-- Index names: kind 'ok'/'op' (open key / prefix leases) or 'rk'/'rp' (remembered).
local function names_key(kind, b) return P .. ':' .. kind .. ':' .. bk(b) end
local function filed_key(kind, b, s) return P .. ':' .. kind .. 'l:' .. bk(b) .. ':' .. s end

local function file(kk, kp, l)
  local kind, s = kk, l.k
  if s == nil then kind, s = kp, l.p end
  redis.call('ZADD', names_key(kind, l.b), 0, s)
  redis.call('ZADD', filed_key(kind, l.b, s), fmt(l.tok), l.id)
end
local function unfile(kk, kp, l)
  local kind, s = kk, l.k
  if s == nil then kind, s = kp, l.p end
  local fk = filed_key(kind, l.b, s)
  redis.call('ZREM', fk, l.id)
  if redis.call('EXISTS', fk) == 0 then redis.call('ZREM', names_key(kind, l.b), s) end
end

-- The leases filed under exactly s; a record Redis's TTL dropped leaves the index here.
local function filed(kind, b, s, acc, seen)
  local fk = filed_key(kind, b, s)
  for _, id in ipairs(redis.call('ZRANGE', fk, 0, -1)) do
    if not seen[id] then
      seen[id] = true
      local l = lease(id)
      if l then
        acc[#acc + 1] = l
      else
        redis.call('ZREM', fk, id)
        if redis.call('EXISTS', fk) == 0 then redis.call('ZREM', names_key(kind, b), s) end
      end
    end
  end
end
-- Leases filed under a string that starts with p: one lexicographic range (no valid UTF-8
-- string holds the byte 0xFF, so p .. 0xFF bounds every string that starts with p).
local function filed_under(kind, b, p, acc, seen)
  for _, s in ipairs(redis.call('ZRANGEBYLEX', names_key(kind, b), '[' .. p, '(' .. p .. '\255')) do
    filed(kind, b, s, acc, seen)
  end
end
-- Leases filed under a string that s starts with (s itself included): each of s's prefixes
-- looked up by itself, or the few filed strings read at once when there are fewer of them, so
-- the cost never grows with the number of live leases beyond the length of s.
local function filed_prefixes_of(kind, b, s, acc, seen)
  local nk = names_key(kind, b)
  local n = redis.call('ZCARD', nk)
  if n == 0 then return end
  if n <= 16 then
    for _, q in ipairs(redis.call('ZRANGE', nk, 0, -1)) do
      if string.sub(s, 1, #q) == q then filed(kind, b, q, acc, seen) end
    end
    return
  end
  for i = 0, #s do
    local q = string.sub(s, 1, i)
    if redis.call('ZSCORE', nk, q) then filed(kind, b, q, acc, seen) end
  end
end
-- Leases whose resource overlaps (b, key | prefix): the open ones or every remembered one.
local function overlapping(open, b, key, prefix)
  local kk, kp = 'rk', 'rp'
  if open then kk, kp = 'ok', 'op' end
  local acc, seen = {}, {}
  if key ~= nil then
    filed(kk, b, key, acc, seen)
    filed_prefixes_of(kp, b, key, acc, seen)
  else
    filed_under(kk, b, prefix, acc, seen)
    filed_under(kp, b, prefix, acc, seen)
    filed_prefixes_of(kp, b, prefix, acc, seen)
  end
  return acc
end
local function lowest(list, keep)
  local best = nil
  for _, l in ipairs(list) do
    if keep(l) and (best == nil or l.tok < best.tok) then best = l end
  end
  return best
end
local function active_overlapping(b, key, prefix, now)
  return lowest(overlapping(true, b, key, prefix), function(l) return is_active(l, now) end)
end
local function newer_overlapping(l)
  return lowest(overlapping(false, l.b, l.k, l.p), function(o) return o.tok > l.tok end)
end
local function by_token(a, b) return a.tok < b.tok end
local function raws(list)
  local out = {}
  for i, l in ipairs(list) do out[i] = l.raw end
  return out
end

-- Commit intents on objects the resource covers, as (id, bucket, key) triples.
local function intents_under(b, key, prefix)
  local keys
  if key ~= nil then
    keys = {key}
  else
    keys = redis.call('ZRANGEBYLEX', P .. ':ik:' .. bk(b), '[' .. prefix, '(' .. prefix .. '\255')
  end
  local out = {}
  for _, k in ipairs(keys) do
    for _, id in ipairs(redis.call('SMEMBERS', P .. ':ikl:' .. bk(b) .. ':' .. k)) do
      out[#out + 1] = id
      out[#out + 1] = b
      out[#out + 1] = k
    end
  end
  return out
end
local function forget_intent(id)
  local i = redis.call('HMGET', P .. ':intent:' .. id, 'b', 'k')
  if not i[1] then return end
  redis.call('DEL', P .. ':intent:' .. id)
  local set = P .. ':ikl:' .. bk(i[1]) .. ':' .. i[2]
  redis.call('SREM', set, id)
  if redis.call('SCARD', set) == 0 then redis.call('ZREM', P .. ':ik:' .. bk(i[1]), i[2]) end
end

-- A forgotten lease takes its delegates with it.
local function forget_delegates(lid)
  local dids = redis.call('ZRANGE', P .. ':dlgl:' .. lid, 0, -1)
  for _, did in ipairs(dids) do
    redis.call('ZREM', P .. ':dlg', lid .. ' ' .. did)
    redis.call('HDEL', P .. ':dlgr', lid .. ' ' .. did)
  end
  redis.call('DEL', P .. ':dlgl:' .. lid)
end

-- Ended leases are forgotten after RETAIN; their record's own TTL is only the backstop.
local function keep_until(l, ended_at, now)
  redis.call('ZADD', P .. ':forget', fmt(ended_at + RETAIN), l.id)
  redis.call('PEXPIRE', LEASE .. l.id, fmt(math.max(1, ended_at + RETAIN - now) + MARGIN))
end
-- Marks an open lease ended at ended_at: out of the open indexes and the expiry order, so that
-- no later grant or check sees it active again, whatever the clock does.
local function end_lease(l, ended_at, now)
  redis.call('HSET', LEASE .. l.id, 'end', fmt(ended_at))
  unfile('ok', 'op', l)
  redis.call('ZREM', P .. ':exp', l.id)
  keep_until(l, ended_at, now)
end
-- Open leases overlapping a resource that expired unnoticed (not seen to end), in token order.
local function lapsed_overlapping(b, key, prefix, now)
  local lapsed = {}
  for _, o in ipairs(overlapping(true, b, key, prefix)) do
    if is_open(o) and o.exp <= now then lapsed[#lapsed + 1] = o end
  end
  table.sort(lapsed, by_token)
  return lapsed
end
-- Ends leases that expired unnoticed, each at its expiry; answers their hashes, in list order.
local function end_expired(list, now)
  local raw = {}
  for i, l in ipairs(list) do
    end_lease(l, l.exp, now)
    raw[i] = redis.call('HGETALL', LEASE .. l.id)
  end
  return raw
end
-- A new lease (key or prefix nil, principal '' for none): its record, filed as open (overlap
-- checks) and remembered (findNewerOverlapping), in expiry order (collectExpired, list). Answers
-- its hash.
local function grant(id, b, key, prefix, owner, principal, tok, ttl, now)
  local fields = {'id', id, 'b', b, 'o', owner, 'tok', fmt(tok), 'ttl', fmt(ttl), 'acq', fmt(now),
    'exp', fmt(now + ttl)}
  if key ~= nil then fields[#fields + 1] = 'k'; fields[#fields + 1] = key
  else fields[#fields + 1] = 'p'; fields[#fields + 1] = prefix end
  if principal ~= '' then fields[#fields + 1] = 'pr'; fields[#fields + 1] = principal end
  redis.call('HSET', LEASE .. id, unpack(fields))
  local l = {id = id, b = b, k = key, p = prefix, tok = tok}
  file('ok', 'op', l)
  file('rk', 'rp', l)
  redis.call('ZADD', P .. ':exp', fmt(now + ttl), id)
  -- Redis's TTL is a backstop only: expiry is decided from 'exp' against the clock.
  redis.call('PEXPIRE', LEASE .. id, fmt(ttl + RETAIN + MARGIN))
  return redis.call('HGETALL', LEASE .. id)
end
--{{AUDIT_APPEND}}

-- The event context (EVENT_ARGS), from ARGV[i] on: the gateway id ('' or absent: the caller
-- records the events), the records' time (ms), the op of the call's own event, then the caller's
-- principal and request id, each '-' for none or '=' followed by the value.
local EV = nil
local SEQ = 0
local function events_from(i)
  if ARGV[i] == nil or ARGV[i] == '' then return end
  local function opt(v) if v == '-' then return nil end return string.sub(v, 2) end
  EV = {gw = ARGV[i], t = ARGV[i + 1], op = ARGV[i + 2], pr = opt(ARGV[i + 3]), rq = opt(ARGV[i + 4])}
end
-- Asked before anything changes: a script that must record its events and cannot (the log's
-- counter is gone after a loss of data) changes nothing.
local function events_ready() return EV == nil or audit_ready() end
-- The record of an event on lease f (its hash fields: id, b, k | p, o, tok as stored), with the
-- fields LeaseService's draft() gives it: the lease's own, the caller's principal and request id,
-- accepted. A side event (an expiry the call saw) is nobody's doing: neither principal nor request
-- id. Scripts record before they change the lease: should an append fail half-way (Redis keeps
-- what a script wrote before an error), the lease is still as it was.
local function record_event(f, side)
  if EV == nil then return end
  local r = {t = EV.t, op = side or EV.op, b = f.b, k = f.k, p = f.p, tok = f.tok, lid = f.id,
    own = f.o or '', d = 'accepted', gw = EV.gw}
  if side == nil then
    r.pr = EV.pr
    r.rq = EV.rq
  end
  SEQ = audit_append(r)
end
-- A lease read by lease(id), as the stored fields record_event takes.
local function stored(l)
  local f = {}
  for i = 1, #l.raw, 2 do f[l.raw[i]] = l.raw[i + 1] end
  return f
end
-- An administrator's break of open lease l: released and marked broken ('brk': what a refusal of
-- its holder later says) if active; if it had expired unnoticed, its expiry is recorded first.
local function break_open(l, now)
  if is_active(l, now) then
    record_event(stored(l))
    redis.call('HSET', LEASE .. l.id, 'rel', fmt(now), 'brk', fmt(now))
    end_lease(l, now, now)
  else
    record_event(stored(l), 'LeaseExpired')
    record_event(stored(l))
    end_lease(l, l.exp, now)
  end
end
