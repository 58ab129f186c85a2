--{{PRELUDE}}

local lid, did = ARGV[3], ARGV[4]
if redis.call('ZREM', P .. ':dlgl:' .. lid, did) == 0 then return 0 end
redis.call('ZREM', P .. ':dlg', lid .. ' ' .. did)
redis.call('HDEL', P .. ':dlgr', lid .. ' ' .. did)
return 1
