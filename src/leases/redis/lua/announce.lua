--{{PRELUDE}}

return redis.call('PUBLISH', P .. ':wake', ARGV[3])
