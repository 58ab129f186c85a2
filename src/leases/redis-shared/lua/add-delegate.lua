--{{PRELUDE}}

local lid, did = ARGV[3], ARGV[4]
-- Only a lease the store still remembers can have delegates.
if redis.call('EXISTS', LEASE .. lid) == 0 then return 'notfound' end
local seq = redis.call('INCR', P .. ':dlgseq')
local member = lid .. ' ' .. did
redis.call('ZADD', P .. ':dlg', seq, member)
redis.call('ZADD', P .. ':dlgl:' .. lid, seq, did)
redis.call('HSET', P .. ':dlgr', member, cjson.encode({delegateId = did, leaseId = lid, createdBy = ARGV[5], createdAt = ARGV[6]}))
return 'ok'
