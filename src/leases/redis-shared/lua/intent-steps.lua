
-- The refusal of a write whose intent is asked for (nil when it may go on): an unfenced write to
-- a key an active lease covers, or a fenced write whose lease is not current.
local function intent_refusal(kind, b, key, lid, tok, now)
  if kind == 'unfenced' then
    local covering = active_overlapping(b, key, nil, now)
    if covering then return {'refused', fmt(now), {}, {}, covering.raw} end
    return nil
  end
  local l = lease(lid)
  if not l then return {'refused', fmt(now), {}, {}, {}} end
  local covers = l.b == b and ((l.k ~= nil and l.k == key) or (l.p ~= nil and string.sub(key, 1, #l.p) == l.p))
  if not covers or l.tok ~= tok then return {'refused', fmt(now), l.raw, {}, {}} end
  -- Ended or expired: superseded when a newer overlapping lease exists, expired otherwise.
  if not is_active(l, now) then
    local n = newer_overlapping(l)
    if n then return {'refused', fmt(now), l.raw, n.raw, {}} end
    return {'refused', fmt(now), l.raw, {}, {}}
  end
  return nil
end
-- fields: the intent's hash (b, k, at, and lid, tok for a fenced write), b and key among them.
local function put_intent(intent_id, b, key, fields)
  redis.call('HSET', P .. ':intent:' .. intent_id, unpack(fields))
  redis.call('SADD', P .. ':ikl:' .. bk(b) .. ':' .. key, intent_id)
  redis.call('ZADD', P .. ':ik:' .. bk(b), 0, key)
end
local function file_intent(intent_id, kind, b, key, lid, tok, now)
  local fields = {'b', b, 'k', key, 'at', fmt(now)}
  if kind == 'fenced' then
    fields[#fields + 1] = 'lid'; fields[#fields + 1] = lid
    fields[#fields + 1] = 'tok'; fields[#fields + 1] = fmt(tok)
  end
  put_intent(intent_id, b, key, fields)
end
