--{{PRELUDE}}

return redis.call('HDEL', P .. ':pool:' .. ARGV[3], ARGV[4])
