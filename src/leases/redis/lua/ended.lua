--{{PRELUDE}}
--{{WAIT_LIB}}

local now = clock(false)
local heads, seen = {}, {}
for i = 3, #ARGV, 3 do w_heads(ARGV[i + 1], ARGV[i], ARGV[i + 2], now, heads, seen) end
w_publish('ended', heads, nil)
return #heads
