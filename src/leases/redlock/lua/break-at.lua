--{{PRELUDE}}
--{{TAKE_PROPOSED}}

local id, t = ARGV[3], tonumber(ARGV[4])
-- The token first, whatever the lease: a fence token must be taken by a majority in one round,
-- and an instance where the lease already ended still takes it.
local took = take_proposed(t)
if took == nil then return {'epoch'} end
if took == false then return {'stale', redis.call('HGET', P .. ':floor', 'last')} end
local l = lease(id)
if not l or not is_open(l) then return {'notfound'} end
local now = clock(true)
-- No events here (the Redlock store records them once a majority answered): break_open records nothing.
break_open(l, now)
return {'broken', redis.call('HGETALL', LEASE .. id), intents_under(l.b, l.k, l.p)}
