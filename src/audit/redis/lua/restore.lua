
local A = KEYS[1] .. ':a'
if redis.call('EXISTS', A .. ':seq') == 1 then return 0 end
local floor = tonumber(ARGV[1])
local archived = 0
for i = 2, #ARGV, 2 do
  redis.call('ZADD', A .. ':seg', ARGV[i + 1], ARGV[i])
  archived = tonumber(ARGV[i + 1])
end
-- Records of the lost state are gone; what the archive holds is still answered.
if archived > 0 then redis.call('SET', A .. ':archived', archived) end
redis.call('SET', A .. ':seq', string.format('%.0f', math.max(floor, archived)))
return 1
