--{{PRELUDE}}

return redis.call('HGETALL', LEASE .. ARGV[3])
