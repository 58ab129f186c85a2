--{{PRELUDE}}

local key, owner, ttl = P .. ':pool:' .. ARGV[3], ARGV[4], tonumber(ARGV[5])
local now = clock(false)
redis.call('HSET', key, owner, fmt(now + ttl))
local out, longest = {}, ttl
local all = redis.call('HGETALL', key)
for i = 1, #all, 2 do
  local until_ = tonumber(all[i + 1])
  if until_ < now then
    redis.call('HDEL', key, all[i])
  else
    out[#out + 1] = all[i]
    if until_ - now > longest then longest = until_ - now end
  end
end
redis.call('PEXPIRE', key, fmt(longest + 60000))
return out
