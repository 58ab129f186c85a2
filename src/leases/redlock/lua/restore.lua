--{{PRELUDE}}

local fields = {}
local l = {}
for i = 3, #ARGV, 2 do
  fields[#fields + 1] = ARGV[i]; fields[#fields + 1] = ARGV[i + 1]
  l[ARGV[i]] = ARGV[i + 1]
end
l.tok = tonumber(l.tok)
l.exp = tonumber(l.exp)
if redis.call('EXISTS', LEASE .. l.id) == 1 then return 'known' end
local now = clock(false)
local other = active_overlapping(l.b, l.k, l.p, now)
if other then return 'conflict' end
redis.call('HSET', LEASE .. l.id, unpack(fields))
file('rk', 'rp', l)
if l['end'] == nil then
  file('ok', 'op', l)
  redis.call('ZADD', P .. ':exp', fmt(l.exp), l.id)
  redis.call('PEXPIRE', LEASE .. l.id, fmt(math.max(1, l.exp - now) + RETAIN + MARGIN))
else
  keep_until(l, tonumber(l['end']), now)
end
local last = floor_known()
if last and last < l.tok then redis.call('HSET', P .. ':floor', 'last', fmt(l.tok)) end
return 'restored'
