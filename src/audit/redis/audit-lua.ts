/**
 * The audit append as a Lua function, shared by the audit log's own append script and by the
 * lease scripts (src/leases/redis), which record a lease event in the same script that changes
 * the lease: the event and its record commit together or not at all.
 *
 * A script that includes AUDIT_APPEND_LUA defines `P` (the deployment's key prefix, KEYS[1])
 * before it, and calls `audit_append(r)` with `r` a table of record fields (AUDIT_FIELDS, all
 * strings, `t` the time in ms, absent fields nil). It returns the record's seq. Before changing
 * anything it calls `audit_ready()` and refuses when it is false (Redis writes made before an
 * error in a script stay): the log's counter is gone, Redis lost its data, and the gateway
 * restores the counter above every seq given out before the log takes records again.
 *
 * Layout under the deployment's key prefix P (every key carries the same hash tag):
 * - `P:a`               the log: one stream entry per record, id `0-<seq>`, in commit order;
 * - `P:a:seq`           the last seq given out (INCR inside the appending script: one total
 *                       order for every replica, see below);
 * - `P:a:x:<f>:<value>` one index per filter value: streams with the log's ids and no payload
 *                       for b bucket, d decision, o op; sorted sets of seqs (score = member =
 *                       seq) for k key, p lease prefix, l lease, tx transaction. A filtered page
 *                       reads only its own index (the keys of a transaction, `ks`, have none);
 * - `P:a:n:k`, `P:a:n:p` every key and every lease prefix that has an index (sorted by bytes):
 *                       a prefix filter finds its indexes with one range read;
 * - `P:a:last`          the latest record time (ms), and `h` in each record: the latest time of
 *                       the log up to and including that record, which never decreases with seq;
 * - `P:a:lag`           how far (ms) any record's time was behind the latest time before it
 *                       (replicas' clocks differ): a record with time t has h - lag <= t <= h,
 *                       so a time window is a seq range found by binary search on h;
 * - `P:a:archived`, `P:a:seg`  the last seq moved to the archive, and the archive's segments by
 *                       their last seq (redis-archiver.ts).
 */

/** Stream fields of a record, in the order the log writes them; a null field is left out. */
export const AUDIT_FIELDS = [
  "t",
  "op",
  "b",
  "k",
  "p",
  "tok",
  "lid",
  "own",
  "pr",
  "d",
  "r",
  "ht",
  "rq",
  "gw",
  // Added later (records from before have neither): the fenced transaction, and the keys of a
  // transaction's commit or abort as one JSON array.
  "tx",
  "ks",
] as const;

export type AuditField = (typeof AUDIT_FIELDS)[number];

/** The query filter -> the index name (`P:a:x:<name>:<value>`). */
export const AUDIT_INDEXES = {
  bucket: "b",
  key: "k",
  leaseId: "l",
  decision: "d",
  op: "o",
  transactionId: "tx",
} as const;

/** The key prefix used when the configuration names none (the hash tag keeps one slot). */
export const DEFAULT_REDIS_KEY_PREFIX = "{fencegate}";

/** Lua: `audit_append(r)` appends record `r` (field -> string, `t` in ms) and returns its seq. */
export const AUDIT_APPEND_LUA = `
local AUDIT_FIELDS = {${AUDIT_FIELDS.map((f) => `'${f}'`).join(", ")}}
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
`;
