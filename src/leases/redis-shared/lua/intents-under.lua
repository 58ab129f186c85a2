--{{PRELUDE}}

if ARGV[3] == 'k' then return intents_under(ARGV[4], ARGV[5], nil) end
return intents_under(ARGV[4], nil, ARGV[5])
