import { ACQUIRE, RELEASE_BODY } from "./lease-scripts.js";
import { PRELUDE } from "./prelude.js";

/**
 * The wait queue every gateway replica shares (redis-wait-queue.ts), and pool membership. Each
 * script starts with the lease prelude (KEYS[1] = P, ARGV[1..2] = clock, retention).
 *
 * Key layout under P:
 * - `P:wseq`   the arrival counter: each waiter's ticket takes the next number, in Redis;
 * - `P:wq:<b>` the bucket's waiter tickets by arrival number (a sorted set);
 * - `P:wt:<id>` hash: b, kd ('k' | 'p'), s (key or prefix), dl (deadline: refreshed by its
 *              gateway while it waits; a ticket past it is dropped, so a dead gateway's waiter
 *              is skipped), seq;
 * - `P:wl:<id>` a ticket left before its enqueue was seen (that enqueue's answer was lost, and the
 *              enqueue may still be on its way): an enqueue of it arriving later queues nothing;
 * - `P:pool:<name>` hash: worker → until (ms) (pool membership, every replica's workers).
 * Wake-ups are published on `P:wake` as JSON {m = 'ended' | 'left' | 'held', t = [ticket ids],
 * l = the holder (HGETALL), for 'held'}: the tickets now first in line for the resource concerned.
 */
const WAIT_LIB = `
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
`;

/**
 * ARGV[3..7]: ticket id, kind ('k' | 'p'), bucket, key or prefix, ticket TTL (ms). Takes the
 * next arrival number and queues the ticket. Answers 1 when no earlier live ticket overlaps it
 * (it may try at once), 0 otherwise (and 0, queuing nothing, for a ticket already left).
 */
export const ENQUEUE = `${PRELUDE}${WAIT_LIB}
local id, kd, b, s, ttl = ARGV[3], ARGV[4], ARGV[5], ARGV[6], tonumber(ARGV[7])
if redis.call('EXISTS', P .. ':wl:' .. id) == 1 then return 0 end
local now = clock(false)
local seq = redis.call('INCR', P .. ':wseq')
redis.call('HSET', P .. ':wt:' .. id, 'b', b, 'kd', kd, 's', s, 'dl', fmt(now + ttl), 'seq', fmt(seq))
redis.call('PEXPIRE', P .. ':wt:' .. id, fmt(ttl + 60000))
redis.call('ZADD', w_queue(b), seq, id)
if w_ahead(b, kd, s, seq, now) then return 0 end
return 1
`;

if (!ACQUIRE.startsWith(PRELUDE)) throw new Error("the acquire script no longer starts with the prelude");

/**
 * The acquire script (lease-scripts.ts), with the same arguments, for a queued waiter whose
 * ticket key is KEYS[2]: in the same atomic step, nothing is granted unless the ticket is live
 * and no earlier live ticket overlaps it. Answers {'gone'} (the ticket expired: queue again), {'behind'}, or what
 * the acquire script answers; a grant removes the ticket and publishes 'held' for the tickets
 * now first in line.
 */
export const ACQUIRE_AS_HEAD = `${PRELUDE}${WAIT_LIB}
local TICKET = string.sub(KEYS[2], #P + 5)
local tk = redis.call('HMGET', KEYS[2], 'b', 'kd', 's', 'dl', 'seq')
local now0 = clock(false)
if not tk[1] or tonumber(tk[4]) <= now0 then return {'gone'} end
if w_ahead(tk[1], tk[2], tk[3], tonumber(tk[5]), now0) then return {'behind'} end
local function acquire()
${ACQUIRE.slice(PRELUDE.length)}
end
local r = acquire()
if r[1] == 'granted' then
  w_drop(tk[1], TICKET)
  w_publish('held', w_heads(tk[1], tk[2], tk[3], now0, {}, {}), r[2])
end
return r
`;

/**
 * ARGV[3]: ticket TTL (ms); ARGV[4..]: ticket ids. Removes them; publishes 'left' for the tickets
 * now first in line. Idempotent: a ticket not queued (yet) is marked left, so that its enqueue,
 * should it still arrive, queues nothing. Answers how many were queued.
 */
export const LEAVE = `${PRELUDE}${WAIT_LIB}
local ttl = tonumber(ARGV[3])
local left = {}
for i = 4, #ARGV do
  local id = ARGV[i]
  local t = redis.call('HMGET', P .. ':wt:' .. id, 'b', 'kd', 's')
  if t[1] then
    w_drop(t[1], id)
    left[#left + 1] = t
  else
    redis.call('SET', P .. ':wl:' .. id, '1', 'PX', fmt(ttl + 60000))
  end
end
local now, heads, seen = clock(false), {}, {}
for _, t in ipairs(left) do w_heads(t[1], t[2], t[3], now, heads, seen) end
w_publish('left', heads, nil)
return #left
`;

/**
 * ARGV[3..]: (kind, bucket, key or prefix) of each lease that ended. Publishes 'ended' for the
 * tickets first in line among those overlapping them.
 */
export const ENDED = `${PRELUDE}${WAIT_LIB}
local now = clock(false)
local heads, seen = {}, {}
for i = 3, #ARGV, 3 do w_heads(ARGV[i + 1], ARGV[i], ARGV[i + 2], now, heads, seen) end
w_publish('ended', heads, nil)
return #heads
`;

/** ARGV[3..]: (kind, bucket, key or prefix) triples. Answers the live tickets overlapping each. */
export const COUNT = `${PRELUDE}${WAIT_LIB}
local now = clock(false)
local out = {}
for i = 3, #ARGV, 3 do
  local n = 0
  for _, t in ipairs(w_live(ARGV[i + 1], now, nil)) do
    if w_overlaps(t.kd, t.s, ARGV[i], ARGV[i + 2]) then n = n + 1 end
  end
  out[#out + 1] = n
end
return out
`;

/**
 * ARGV[3]: ticket TTL (ms); ARGV[4..]: ticket ids still waiting. Moves their deadlines on, and
 * answers those of them now first in line (a dead gateway's ticket ahead ran out meanwhile).
 */
export const REFRESH = `${PRELUDE}${WAIT_LIB}
local now, ttl = clock(false), tonumber(ARGV[3])
local heads = {}
for i = 4, #ARGV do
  local key = P .. ':wt:' .. ARGV[i]
  local t = redis.call('HMGET', key, 'b', 'kd', 's', 'seq')
  if t[1] then
    redis.call('HSET', key, 'dl', fmt(now + ttl))
    redis.call('PEXPIRE', key, fmt(ttl + 60000))
    if not w_ahead(t[1], t[2], t[3], tonumber(t[4]), now) then heads[#heads + 1] = ARGV[i] end
  end
end
return heads
`;

/**
 * ARGV[3..5]: pool, worker, TTL (ms). The worker is a member until now + TTL; answers every
 * member whose time has not run out (expired ones are dropped).
 */
export const POOL_JOIN = `${PRELUDE}
local key, owner, ttl = P .. ':pool:' .. ARGV[3], ARGV[4], tonumber(ARGV[5])
local now = clock(false)
redis.call('HSET', key, owner, fmt(now + ttl))
local out, longest = {}, ttl
local all = redis.call('HGETALL', key)
for i = 1, #all, 2 do
  local until_ = tonumber(all[i + 1])
  if until_ < now then
    redis.call('HDEL', key, all[i])
  else
    out[#out + 1] = all[i]
    if until_ - now > longest then longest = until_ - now end
  end
end
redis.call('PEXPIRE', key, fmt(longest + 60000))
return out
`;

/** ARGV[3]: a notice for every replica (JSON), published on the wake-up channel. */
export const ANNOUNCE = `${PRELUDE}
return redis.call('PUBLISH', P .. ':wake', ARGV[3])
`;

/** ARGV[3..4]: pool, worker. */
export const POOL_LEAVE = `${PRELUDE}
return redis.call('HDEL', P .. ':pool:' .. ARGV[3], ARGV[4])
`;

/**
 * The release script (lease-scripts.ts), with the same arguments and answers, that also tells
 * the waiters now first in line for the ended lease's resource ('ended', as ENDED does) in the
 * same atomic step: a release is one call to Redis, not a release and a wake-up after it.
 */
export const RELEASE_AND_WAKE = `${PRELUDE}${WAIT_LIB}
local function wake_ended(l, now)
  local kd, s = 'k', l.k
  if s == nil then kd, s = 'p', l.p end
  w_publish('ended', w_heads(l.b, kd, s, now, {}, {}), nil)
end
${RELEASE_BODY}`;
