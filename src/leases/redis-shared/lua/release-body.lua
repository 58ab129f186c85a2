local id = ARGV[3]
events_from(4)
if not events_ready() then return {'auditlost'} end
local l = lease(id)
if not l or not is_open(l) then return {'notfound'} end
local now = clock(true)
if not is_active(l, now) then
  record_event(stored(l), 'LeaseExpired')
  end_lease(l, l.exp, now)
  wake_ended(l, now)
  return {'expired', redis.call('HGETALL', LEASE .. id), SEQ}
end
record_event(stored(l))
redis.call('HSET', LEASE .. id, 'rel', fmt(now))
-- Out of the open indexes at once: the resource is free for the next grant. Still answerable
-- (get, findNewerOverlapping) until retention forgets it.
end_lease(l, now, now)
wake_ended(l, now)
return {'released', redis.call('HGETALL', LEASE .. id), SEQ}
