--{{PRELUDE}}
--{{INTENT_STEPS}}
--{{RESTORE_INTENTS}}

local e, low, q = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local run = current_runid()
local last, epoch = floor_known()
if last then
  if low > last then redis.call('HSET', P .. ':floor', 'last', fmt(low)) end
  if e > epoch then redis.call('HSET', P .. ':floor', 'epoch', fmt(e)) end
  return {'current'}
end
redis.call('DEL', P .. ':floor')
redis.call('HSET', P .. ':floor', 'epoch', fmt(e), 'last', fmt(low), 'runid', run)
if q > 0 then redis.call('HSET', P .. ':floor', 'q', fmt(q), 'ip', '1') end
restore_intents(6)
return {'installed'}
