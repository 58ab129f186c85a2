--{{PRELUDE}}

local l = {b = ARGV[4], tok = tonumber(ARGV[6])}
if ARGV[3] == 'k' then l.k = ARGV[5] else l.p = ARGV[5] end
local n = newer_overlapping(l)
if n then return n.raw end
return {}
