--{{PRELUDE}}

local id = ARGV[3]
events_from(4)
if not events_ready() then return {'auditlost'} end
local l = lease(id)
if not l or not is_open(l) then return {'notfound'} end
local now = clock(true)
-- The token first: while the floor is unknown nothing changes.
local tok = take_token()
if not tok then return {'epoch'} end
break_open(l, now)
return {'broken', redis.call('HGETALL', LEASE .. id), fmt(tok), intents_under(l.b, l.k, l.p), SEQ}
