--{{PRELUDE}}
--{{WAIT_LIB}}

local ttl = tonumber(ARGV[3])
local left = {}
for i = 4, #ARGV do
  local id = ARGV[i]
  local t = redis.call('HMGET', P .. ':wt:' .. id, 'b', 'kd', 's')
  if t[1] then
    w_drop(t[1], id)
    left[#left + 1] = t
  else
    redis.call('SET', P .. ':wl:' .. id, '1', 'PX', fmt(ttl + 60000))
  end
end
local now, heads, seen = clock(false), {}, {}
for _, t in ipairs(left) do w_heads(t[1], t[2], t[3], now, heads, seen) end
w_publish('left', heads, nil)
return #left
