--{{PRELUDE}}

-- The prefix's own glob characters match only themselves.
local pattern = string.gsub(P, '[%*%?%[%]\\]', '\\%0') .. ':intent:*'
local page = redis.call('SCAN', ARGV[3], 'MATCH', pattern, 'COUNT', tonumber(ARGV[4]))
local out = {}
local from = #P + #':intent:' + 1
for _, k in ipairs(page[2]) do
  local i = redis.call('HMGET', k, 'b', 'k', 'at', 'lid', 'tok')
  if i[1] and i[2] then
    out[#out + 1] = string.sub(k, from)
    out[#out + 1] = i[1]
    out[#out + 1] = i[2]
    out[#out + 1] = i[3] or '0'
    out[#out + 1] = i[4] or ''
    out[#out + 1] = i[5] or ''
  end
end
return {page[1], out}
