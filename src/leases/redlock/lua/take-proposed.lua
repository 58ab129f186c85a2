
local function take_proposed(t)
  local last = floor_known()
  if not last then return nil end
  if last >= t then return false end
  redis.call('HSET', P .. ':floor', 'last', fmt(t))
  return true
end
