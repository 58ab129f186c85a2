--{{PRELUDE}}
--{{WAIT_LIB}}

local now = clock(false)
local out = {}
for i = 3, #ARGV, 3 do
  local n = 0
  for _, t in ipairs(w_live(ARGV[i + 1], now, nil)) do
    if w_overlaps(t.kd, t.s, ARGV[i], ARGV[i + 2]) then n = n + 1 end
  end
  out[#out + 1] = n
end
return out
