
local A = KEYS[1] .. ':a'
local expected = tonumber(ARGV[1])
local last = tonumber(ARGV[2])
-- Only the archiver that read the log from where the archive ended may move it on: two
-- gateways racing for the same records register one segment, never two overlapping ones.
if tonumber(redis.call('GET', A .. ':archived') or '0') ~= expected then return 0 end
-- The indexes holding the records being moved, read from the records themselves.
local INDEX = {b = 'b', k = 'k', p = 'p', lid = 'l', d = 'd', op = 'o', tx = 'tx'}
local keys = {}
local pos = expected
while true do
  local es = redis.call('XRANGE', A, '(0-' .. pos, '0-' .. last, 'COUNT', 1000)
  for _, e in ipairs(es) do
    local f = e[2]
    for i = 1, #f, 2 do
      local name = INDEX[f[i]]
      if name ~= nil then keys[A .. ':x:' .. name .. ':' .. f[i + 1]] = {name, f[i + 1]} end
    end
    pos = tonumber(string.sub(e[1], 3))
  end
  if #es < 1000 then break end
end
-- Register the segment and the new archive mark first, in this same script: a query sees
-- every record either here or in a registered segment, never in neither.
redis.call('ZADD', A .. ':seg', last, ARGV[3])
redis.call('SET', A .. ':archived', last)
local min = '0-' .. string.format('%.0f', last + 1)
redis.call('XTRIM', A, 'MINID', min)
for key, what in pairs(keys) do
  local left
  if what[1] == 'k' or what[1] == 'p' or what[1] == 'l' or what[1] == 'tx' then
    -- A sorted set of seqs; Redis deletes it when it becomes empty.
    redis.call('ZREMRANGEBYSCORE', key, '-inf', string.format('%.0f', last))
    left = redis.call('ZCARD', key)
  else
    redis.call('XTRIM', key, 'MINID', min)
    left = redis.call('XLEN', key)
    if left == 0 then redis.call('DEL', key) end
  end
  -- A key or prefix with nothing left in its index is no longer found under its name.
  if left == 0 and (what[1] == 'k' or what[1] == 'p') then
    redis.call('ZREM', A .. ':n:' .. what[1], what[2])
  end
end
return 1
