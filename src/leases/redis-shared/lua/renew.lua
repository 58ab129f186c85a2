--{{PRELUDE}}

local id, ttl = ARGV[3], tonumber(ARGV[4])
events_from(5)
if not events_ready() then return {'auditlost'} end
local now = clock(true)
local l = lease(id)
if not l then return {'notfound'} end
if l.rel then return {l.brk and 'broken' or 'released'} end
-- An expired lease stays expired even if nobody took its resource: its holder must know.
if not is_active(l, now) then return {'expired', fmt(l.exp)} end
record_event(stored(l))
redis.call('HSET', LEASE .. id, 'exp', fmt(now + ttl), 'ttl', fmt(ttl))
redis.call('ZADD', P .. ':exp', fmt(now + ttl), id)
redis.call('PEXPIRE', LEASE .. id, fmt(ttl + RETAIN + MARGIN))
return {'ok', redis.call('HGETALL', LEASE .. id), SEQ}
