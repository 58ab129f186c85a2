
local key = KEYS[1] .. ':a:archiver'
if redis.call('GET', key) == ARGV[1] then return redis.call('DEL', key) end
return 0
