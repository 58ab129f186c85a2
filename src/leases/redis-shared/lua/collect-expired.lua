--{{PRELUDE}}

events_from(4)
if not events_ready() then return {'auditlost'} end
local now = clock(true)
local ids = redis.call('ZRANGEBYSCORE', P .. ':exp', '-inf', fmt(now), 'LIMIT', 0, tonumber(ARGV[3]))
local out = {}
for _, id in ipairs(ids) do
  local l = lease(id)
  if l and is_open(l) and l.exp <= now then out[#out + 1] = l end
end
table.sort(out, by_token)
for _, l in ipairs(out) do record_event(stored(l)) end
-- Marked reported in the same step that reports (and records) it: one replica reports each
-- expiry once.
local reported = end_expired(out, now)
for _, id in ipairs(ids) do redis.call('ZREM', P .. ':exp', id) end
return {'ok', reported, SEQ}
