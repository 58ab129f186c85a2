
local function w_overlaps(k1, s1, k2, s2)
  if k1 == 'k' and k2 == 'k' then return s1 == s2 end
  if k1 == 'p' and string.sub(s2, 1, #s1) == s1 then return true end
  if k2 == 'p' and string.sub(s1, 1, #s2) == s2 then return true end
  return false
end
local function w_queue(b) return P .. ':wq:' .. bk(b) end
local function w_drop(b, id)
  redis.call('ZREM', w_queue(b), id)
  redis.call('DEL', P .. ':wt:' .. id)
end
-- The bucket's live tickets in arrival order (up to arrival number 'before', excluded, if
-- given); tickets past their deadline are dropped on the way.
local function w_live(b, now, before)
  local max = '+inf'
  if before then max = '(' .. fmt(before) end
  local out = {}
  for _, id in ipairs(redis.call('ZRANGEBYSCORE', w_queue(b), '-inf', max)) do
    local t = redis.call('HMGET', P .. ':wt:' .. id, 'kd', 's', 'dl')
    if not t[1] or tonumber(t[3]) <= now then
      w_drop(b, id)
    else
      out[#out + 1] = {id = id, kd = t[1], s = t[2]}
    end
  end
  return out
end
-- Whether a live ticket that arrived before 'seq' overlaps (kd, s).
local function w_ahead(b, kd, s, seq, now)
  for _, t in ipairs(w_live(b, now, seq)) do
    if w_overlaps(t.kd, t.s, kd, s) then return true end
  end
  return false
end
-- The tickets first in line among those overlapping (kd, s): no earlier live ticket overlaps them.
local function w_heads(b, kd, s, now, acc, seen)
  local live = w_live(b, now, nil)
  for i, t in ipairs(live) do
    if not seen[t.id] and w_overlaps(t.kd, t.s, kd, s) then
      local first = true
      for j = 1, i - 1 do
        if w_overlaps(live[j].kd, live[j].s, t.kd, t.s) then first = false; break end
      end
      if first then seen[t.id] = true; acc[#acc + 1] = t.id end
    end
  end
  return acc
end
local function w_publish(kind, heads, holder)
  if #heads == 0 then return end
  local msg = {m = kind, t = heads}
  if holder then msg.l = holder end
  redis.call('PUBLISH', P .. ':wake', cjson.encode(msg))
end
