--{{PRELUDE}}
--{{WAIT_LIB}}

local now, ttl = clock(false), tonumber(ARGV[3])
local heads = {}
for i = 4, #ARGV do
  local key = P .. ':wt:' .. ARGV[i]
  local t = redis.call('HMGET', key, 'b', 'kd', 's', 'seq')
  if t[1] then
    redis.call('HSET', key, 'dl', fmt(now + ttl))
    redis.call('PEXPIRE', key, fmt(ttl + 60000))
    if not w_ahead(t[1], t[2], t[3], tonumber(t[4]), now) then heads[#heads + 1] = ARGV[i] end
  end
end
return heads
