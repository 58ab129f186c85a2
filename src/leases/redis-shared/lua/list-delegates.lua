--{{PRELUDE}}

local members
if ARGV[3] ~= '' then
  members = {}
  for i, did in ipairs(redis.call('ZRANGE', P .. ':dlgl:' .. ARGV[3], 0, -1)) do members[i] = ARGV[3] .. ' ' .. did end
else
  members = redis.call('ZRANGE', P .. ':dlg', 0, -1)
end
if #members == 0 then return {} end
return redis.call('HMGET', P .. ':dlgr', unpack(members))
