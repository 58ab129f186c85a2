
local AUDIT_FIELDS = {{{AUDIT_FIELDS}}}
-- The counter exists from the log's first start on (the gateway creates it); without it the
-- next seqs would repeat ones already given out.
local function audit_ready() return redis.call('EXISTS', P .. ':a:seq') == 1 end
local function audit_append(r)
  local A = P .. ':a'
  -- The seq is taken here, inside the script that writes the record, never before it: Redis
  -- runs one script at a time, so once a reader sees seq n, every record below n is already in
  -- the log. A seq taken in one call and written in another would let a reader page past a
  -- record that is still on its way, and never see it.
  local seq = redis.call('INCR', A .. ':seq')
  local id = '0-' .. seq
  -- The log's latest time so far, which never decreases along the log, and the largest lag of
  -- a record behind it: together they turn a time window into a seq range for queries.
  local t = tonumber(r.t)
  local last = redis.call('GET', A .. ':last')
  local h = t
  if last and tonumber(last) > t then
    h = tonumber(last)
    local lag = tonumber(redis.call('GET', A .. ':lag') or '0')
    if h - t > lag then redis.call('SET', A .. ':lag', string.format('%.0f', h - t)) end
  else
    redis.call('SET', A .. ':last', r.t)
  end
  local args = {'XADD', A, id}
  for _, f in ipairs(AUDIT_FIELDS) do
    if r[f] ~= nil then
      args[#args + 1] = f
      args[#args + 1] = r[f]
    end
  end
  args[#args + 1] = 'h'
  args[#args + 1] = string.format('%.0f', h)
  redis.call(unpack(args))
  -- Index entries carry the record's seq: a filtered page reads its index after the cursor and
  -- fetches only the records it returns. Few values with many records each (bucket, decision,
  -- op) are streams with the log's ids, the most compact for long runs; many values with few
  -- records each (key, lease prefix, lease, transaction) are sorted sets by seq, which cost
  -- bytes, not the kilobytes of a stream's first node.
  local function stream_index(name, value)
    if value ~= nil then redis.call('XADD', A .. ':x:' .. name .. ':' .. value, id, 's', '') end
  end
  local s = string.format('%.0f', seq)
  local function set_index(name, value)
    if value ~= nil then redis.call('ZADD', A .. ':x:' .. name .. ':' .. value, s, s) end
  end
  stream_index('b', r.b)
  stream_index('d', r.d)
  stream_index('o', r.op)
  set_index('k', r.k)
  set_index('p', r.p)
  set_index('l', r.lid)
  set_index('tx', r.tx)
  -- Keys and lease prefixes by name, for prefix filters.
  if r.k ~= nil then redis.call('ZADD', A .. ':n:k', 0, r.k) end
  if r.p ~= nil then redis.call('ZADD', A .. ':n:p', 0, r.p) end
  return seq
end
