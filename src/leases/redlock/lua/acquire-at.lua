--{{PRELUDE}}
--{{TAKE_PROPOSED}}

local kind, b, s, owner, ttl, id, principal = ARGV[3], ARGV[4], ARGV[5], ARGV[6], tonumber(ARGV[7]), ARGV[8], ARGV[9]
local t = tonumber(ARGV[10])
local key, prefix = nil, nil
if kind == 'k' then key = s else prefix = s end
local now = clock(true)
local held = active_overlapping(b, key, prefix, now)
if held then return {'held', held.raw} end
local pending = intents_under(b, key, prefix)
local took = take_proposed(t)
if took == nil then return {'epoch'} end
if took == false then return {'stale', redis.call('HGET', P .. ':floor', 'last')} end
if #pending > 0 then return {'fence', pending} end
local lapsed = {}
for _, o in ipairs(overlapping(true, b, key, prefix)) do
  if is_open(o) and o.exp <= now then
    end_lease(o, o.exp, now)
    lapsed[#lapsed + 1] = o
  end
end
table.sort(lapsed, by_token)
local expired = {}
for i, o in ipairs(lapsed) do expired[i] = redis.call('HGETALL', LEASE .. o.id) end
local l = {id = id, b = b, k = key, p = prefix, tok = t}
local fields = {'id', id, 'b', b, 'o', owner, 'tok', fmt(t), 'ttl', fmt(ttl), 'acq', fmt(now),
  'exp', fmt(now + ttl)}
if key ~= nil then fields[#fields + 1] = 'k'; fields[#fields + 1] = key
else fields[#fields + 1] = 'p'; fields[#fields + 1] = prefix end
if principal ~= '' then fields[#fields + 1] = 'pr'; fields[#fields + 1] = principal end
redis.call('HSET', LEASE .. id, unpack(fields))
file('ok', 'op', l)
file('rk', 'rp', l)
redis.call('ZADD', P .. ':exp', fmt(now + ttl), id)
redis.call('PEXPIRE', LEASE .. id, fmt(ttl + RETAIN + MARGIN))
return {'granted', redis.call('HGETALL', LEASE .. id), expired}
