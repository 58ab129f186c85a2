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
if is_active(l, now) then
  record_event(stored(l))
  -- 'brk': broken, not released by its holder (what a refusal of its holder later says).
  redis.call('HSET', LEASE .. id, 'rel', fmt(now), 'brk', fmt(now))
  end_lease(l, now, now)
else
  -- It had ended by expiry: that is recorded first, then the administrator's act.
  record_event(stored(l), 'LeaseExpired')
  record_event(stored(l))
  end_lease(l, l.exp, now)
end
return {'broken', redis.call('HGETALL', LEASE .. id), fmt(tok), intents_under(l.b, l.k, l.p), SEQ}
