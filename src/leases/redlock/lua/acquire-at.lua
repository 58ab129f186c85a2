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
local expired = end_expired(lapsed_overlapping(b, key, prefix, now), now)
return {'granted', grant(id, b, key, prefix, owner, principal, t, ttl, now), expired}
