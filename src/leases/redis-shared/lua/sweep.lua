--{{PRELUDE}}

local now = clock(false)
local ids = redis.call('ZRANGEBYSCORE', P .. ':forget', '-inf', fmt(now), 'LIMIT', 0, tonumber(ARGV[3]))
local due = {}
for _, id in ipairs(ids) do
  local l = lease(id)
  if l then due[#due + 1] = l else redis.call('ZREM', P .. ':forget', id) end
end
table.sort(due, by_token)
local forgotten = 0
for _, l in ipairs(due) do
  local older = lowest(overlapping(false, l.b, l.k, l.p), function(o) return o.tok < l.tok end)
  if not older then
    unfile('rk', 'rp', l)
    forget_delegates(l.id)
    redis.call('DEL', LEASE .. l.id)
    redis.call('ZREM', P .. ':forget', l.id)
    forgotten = forgotten + 1
  end
end
return forgotten
