--{{PRELUDE}}
--{{WAIT_LIB}}

local id, kd, b, s, ttl = ARGV[3], ARGV[4], ARGV[5], ARGV[6], tonumber(ARGV[7])
if redis.call('EXISTS', P .. ':wl:' .. id) == 1 then return 0 end
local now = clock(false)
local seq = redis.call('INCR', P .. ':wseq')
redis.call('HSET', P .. ':wt:' .. id, 'b', b, 'kd', kd, 's', s, 'dl', fmt(now + ttl), 'seq', fmt(seq))
redis.call('PEXPIRE', P .. ':wt:' .. id, fmt(ttl + 60000))
redis.call('ZADD', w_queue(b), seq, id)
if w_ahead(b, kd, s, seq, now) then return 0 end
return 1
