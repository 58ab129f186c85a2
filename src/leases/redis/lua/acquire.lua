--{{PRELUDE}}

local kind, b, s, owner, ttl, id, principal = ARGV[3], ARGV[4], ARGV[5], ARGV[6], tonumber(ARGV[7]), ARGV[8], ARGV[9]
events_from(10)
if not events_ready() then return {'auditlost'} end
local key, prefix = nil, nil
if kind == 'k' then key = s else prefix = s end
local now = clock(true)
local q = quarantined(now)
if q then return {'quarantine', fmt(q)} end
-- Mutual exclusion: an active lease on an overlapping resource stands in the way (the one
-- with the lowest token, so that every replica names the same holder).
local held = active_overlapping(b, key, prefix, now)
if held then return {'held', held.raw} end
-- Commits of ended leases may still be in flight on objects this resource covers: nobody is
-- granted it before the caller has raised those objects' HCT above a fresh token.
local pending = intents_under(b, key, prefix)
if #pending > 0 then
  local tok = take_token()
  if not tok then return {'epoch'} end
  return {'fence', fmt(tok), pending}
end
-- The token and the lease in one step: a grant is never seen without its token taken.
local tok = take_token()
if not tok then return {'epoch'} end
-- Overlapping leases that expired unnoticed end for good now, before the grant, and are
-- reported with it: a clock stepped back cannot make them active beside the new lease.
local lapsed = {}
for _, o in ipairs(overlapping(true, b, key, prefix)) do
  if is_open(o) and o.exp <= now then lapsed[#lapsed + 1] = o end
end
table.sort(lapsed, by_token)
-- The records first (the expiries this grant saw, in token order, then the grant), then the
-- changes they record.
for _, o in ipairs(lapsed) do record_event(stored(o), 'LeaseExpired') end
record_event({id = id, b = b, k = key, p = prefix, o = owner, tok = fmt(tok)})
local expired = {}
for i, o in ipairs(lapsed) do
  end_lease(o, o.exp, now)
  expired[i] = redis.call('HGETALL', LEASE .. o.id)
end
local l = {id = id, b = b, k = key, p = prefix, tok = tok}
local fields = {'id', id, 'b', b, 'o', owner, 'tok', fmt(tok), 'ttl', fmt(ttl), 'acq', fmt(now),
  'exp', fmt(now + ttl)}
if key ~= nil then fields[#fields + 1] = 'k'; fields[#fields + 1] = key
else fields[#fields + 1] = 'p'; fields[#fields + 1] = prefix end
if principal ~= '' then fields[#fields + 1] = 'pr'; fields[#fields + 1] = principal end
redis.call('HSET', LEASE .. id, unpack(fields))
-- Open leases for overlap checks, remembered ones for findNewerOverlapping, expiry order for
-- collectExpired and list.
file('ok', 'op', l)
file('rk', 'rp', l)
redis.call('ZADD', P .. ':exp', fmt(now + ttl), id)
-- Redis's TTL is a backstop only: expiry is decided from 'exp' against the clock above.
redis.call('PEXPIRE', LEASE .. id, fmt(ttl + RETAIN + MARGIN))
return {'granted', redis.call('HGETALL', LEASE .. id), expired, SEQ}
