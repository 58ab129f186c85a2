--{{PRELUDE}}

local b, by_bucket, prefix, by_prefix = ARGV[3], ARGV[4] == '1', ARGV[5], ARGV[6] == '1'
local now = clock(false)
local out = {}
for _, id in ipairs(redis.call('ZRANGEBYSCORE', P .. ':exp', '(' .. fmt(now), '+inf')) do
  local l = lease(id)
  if l and is_active(l, now) and (not by_bucket or l.b == b) then
    local s = l.k or l.p
    if not by_prefix or string.sub(s, 1, #prefix) == prefix then out[#out + 1] = l end
  end
end
table.sort(out, by_token)
return raws(out)
