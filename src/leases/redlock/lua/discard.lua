--{{PRELUDE}}

local l = lease(ARGV[3])
if not l then return 0 end
unfile('ok', 'op', l)
unfile('rk', 'rp', l)
redis.call('ZREM', P .. ':exp', l.id)
redis.call('ZREM', P .. ':forget', l.id)
redis.call('DEL', LEASE .. l.id)
return 1
