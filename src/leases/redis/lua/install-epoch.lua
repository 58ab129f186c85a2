--{{PRELUDE}}

local e, quarantine = tonumber(ARGV[3]), tonumber(ARGV[4])
local f = redis.call('HMGET', P .. ':floor', 'runid', 'epoch')
local run = current_runid()
if f[2] and tonumber(f[2]) >= e then
  if f[1] == run then return {'current', f[2]} end
  return {'stale', f[2]}
end
redis.call('HSET', P .. ':floor', 'epoch', fmt(e), 'last', fmt(e * EPOCH_SPAN), 'runid', run)
-- A floor missing or left by another run of the server means data was lost (a used-up counter
-- keeps its run id): leases granted before may still be held.
if quarantine > 0 and f[1] ~= run then
  redis.call('HSET', P .. ':floor', 'q', fmt(clock(true) + quarantine))
end
return {'installed', fmt(e)}
