--{{PRELUDE}}

local l = active_overlapping(ARGV[3], ARGV[4], nil, clock(false))
if l then return l.raw end
return {}
