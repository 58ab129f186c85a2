import { INTENT_STEPS } from "../../redis/lua/intent-scripts.js";
import { PRELUDE } from "../../redis/lua/prelude.js";

/**
 * The scripts only the Redlock store runs, on each instance of the quorum. They share the
 * one-Redis prelude (key layout, clock, overlap lookups, lease records); what differs is the
 * token: there is no single counter to bump, so the client proposes a token t (one above the
 * highest counter a majority reported) and each instance accepts it only when its own counter
 * is below t, then sets its counter to t. The floor hash `P:floor` keeps `last`, `epoch`, `runid`
 * and `q` (the end of the instance's quarantine) as on one Redis, and `ip` ('1' while the commit
 * intents of an instance that lost its data are not settled: it does not count until they are).
 */

/**
 * No arguments beyond the prelude's. Answers {'ok' | 'unknown', last, epoch, q, runid, ip}:
 * 'unknown' when the floor was never installed in this server's lifetime (a fresh or restarted
 * instance); ip '1' while its commit intents are not settled, '0' otherwise.
 */
export const READ_FLOOR = `${PRELUDE}
local f = redis.call('HMGET', P .. ':floor', 'last', 'epoch', 'q', 'ip')
local run = current_runid()
local last, epoch = floor_known()
if not last then return {'unknown', '0', '-1', '0', run, '0'} end
return {'ok', fmt(last), fmt(epoch), f[3] or '0', run, f[4] or '0'}
`;

/**
 * Commit intents copied onto an instance that lost its data, from ARGV[from] on: six values each
 * (id, bucket, key, at, lease id, token; the last two '' for an unfenced write), as READ_INTENTS
 * lists them. Filed exactly as beginCommit files them; one already there is written again, the same.
 */
const RESTORE_INTENTS = `
local function restore_intents(from)
  for i = from, #ARGV - 5, 6 do
    local fields = {'b', ARGV[i + 1], 'k', ARGV[i + 2], 'at', ARGV[i + 3]}
    if ARGV[i + 4] ~= '' then
      fields[#fields + 1] = 'lid'; fields[#fields + 1] = ARGV[i + 4]
      fields[#fields + 1] = 'tok'; fields[#fields + 1] = ARGV[i + 5]
    end
    put_intent(ARGV[i], ARGV[i + 1], ARGV[i + 2], fields)
  end
end
`;

/**
 * ARGV[3..5]: epoch, the lowest `last` to install, the end of the quarantine (ms, 0 = none);
 * ARGV[6..]: the commit intents the other instances hold (RESTORE_INTENTS).
 * On an instance whose floor is known (same run): raises `last` and `epoch` to at least these
 * ('current'); its intents stay as they are. Otherwise (fresh or restarted): installs them, the
 * quarantine and the intents in one step ('installed'); after a loss (a quarantine), its intents
 * are marked unsettled ('ip'), so that it counts only once SETTLE_INTENTS has run at the end of
 * the quarantine.
 */
export const INSTALL_FLOOR = `${PRELUDE}${INTENT_STEPS}${RESTORE_INTENTS}
local e, low, q = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local run = current_runid()
local last, epoch = floor_known()
if last then
  if low > last then redis.call('HSET', P .. ':floor', 'last', fmt(low)) end
  if e > epoch then redis.call('HSET', P .. ':floor', 'epoch', fmt(e)) end
  return {'current'}
end
redis.call('DEL', P .. ':floor')
redis.call('HSET', P .. ':floor', 'epoch', fmt(e), 'last', fmt(low), 'runid', run)
if q > 0 then redis.call('HSET', P .. ':floor', 'q', fmt(q), 'ip', '1') end
restore_intents(6)
return {'installed'}
`;

/**
 * ARGV[3]: a SCAN cursor ('0' to start), ARGV[4]: how many keys to look at. One page of the commit
 * intents this instance holds: {next cursor ('0' when done), {id, bucket, key, at, lease id, token,
 * ...}} (lease id and token '' for an unfenced write). A page is consistent; pages are not (an
 * intent recorded or forgotten meanwhile may or may not be listed).
 */
export const READ_INTENTS = `${PRELUDE}
-- The prefix's own glob characters match only themselves.
local pattern = string.gsub(P, '[%*%?%[%]\\\\]', '\\\\%0') .. ':intent:*'
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
`;

/**
 * ARGV[3..]: the commit intents the other instances hold (RESTORE_INTENTS), read at or after the
 * end of this instance's quarantine. Copies them here and marks its intents settled: from now on
 * it counts. Answers {'settled'} (also when it already was: nothing is copied then), {'early', q}
 * while the quarantine runs, or {'unknown'} when its floor is unknown (it lost its data again).
 */
export const SETTLE_INTENTS = `${PRELUDE}${INTENT_STEPS}${RESTORE_INTENTS}
if not floor_known() then return {'unknown'} end
local f = redis.call('HMGET', P .. ':floor', 'q', 'ip')
if f[2] ~= '1' then return {'settled'} end
local q = tonumber(f[1] or '0')
if clock(false) < q then return {'early', fmt(q)} end
restore_intents(3)
redis.call('HDEL', P .. ':floor', 'ip')
return {'settled'}
`;

/** Sets the counter to t when t is above it; nil when the floor is unknown, false when it is not below t. */
const TAKE_PROPOSED = `
local function take_proposed(t)
  local last = floor_known()
  if not last then return nil end
  if last >= t then return false end
  redis.call('HSET', P .. ':floor', 'last', fmt(t))
  return true
end
`;

/**
 * ARGV[3..10]: kind ('k' | 'p'), bucket, key or prefix, owner, ttl ms, the new lease's id, the
 * principal ('' = none), the proposed token t. Answers {'granted', lease, expired},
 * {'held', lease}, {'fence', intents} (the counter is now t), {'stale', last} (the counter is
 * at or above t: another grant took it) or {'epoch'} (the floor is unknown).
 */
export const ACQUIRE_AT = `${PRELUDE}${TAKE_PROPOSED}
local kind, b, s, owner, ttl, id, principal = ARGV[3], ARGV[4], ARGV[5], ARGV[6], tonumber(ARGV[7]), ARGV[8], ARGV[9]
local t = tonumber(ARGV[10])
local key, prefix = nil, nil
if kind == 'k' then key = s else prefix = s end
local now = clock(true)
local held = active_overlapping(b, key, prefix, now)
if held then return {'held', held.raw} end
local pending = intents_under(b, key, prefix)
local took = take_proposed(t)
if took == nil then return {'epoch'} end
if took == false then return {'stale', redis.call('HGET', P .. ':floor', 'last')} end
if #pending > 0 then return {'fence', pending} end
local lapsed = {}
for _, o in ipairs(overlapping(true, b, key, prefix)) do
  if is_open(o) and o.exp <= now then
    end_lease(o, o.exp, now)
    lapsed[#lapsed + 1] = o
  end
end
table.sort(lapsed, by_token)
local expired = {}
for i, o in ipairs(lapsed) do expired[i] = redis.call('HGETALL', LEASE .. o.id) end
local l = {id = id, b = b, k = key, p = prefix, tok = t}
local fields = {'id', id, 'b', b, 'o', owner, 'tok', fmt(t), 'ttl', fmt(ttl), 'acq', fmt(now),
  'exp', fmt(now + ttl)}
if key ~= nil then fields[#fields + 1] = 'k'; fields[#fields + 1] = key
else fields[#fields + 1] = 'p'; fields[#fields + 1] = prefix end
if principal ~= '' then fields[#fields + 1] = 'pr'; fields[#fields + 1] = principal end
redis.call('HSET', LEASE .. id, unpack(fields))
file('ok', 'op', l)
file('rk', 'rp', l)
redis.call('ZADD', P .. ':exp', fmt(now + ttl), id)
redis.call('PEXPIRE', LEASE .. id, fmt(ttl + RETAIN + MARGIN))
return {'granted', redis.call('HGETALL', LEASE .. id), expired}
`;

/**
 * ARGV[3]: lease id. Forgets a lease this instance granted in an acquire that did not win a
 * majority: out of every index, its record deleted, as if never granted here (the counter stays).
 */
export const DISCARD = `${PRELUDE}
local l = lease(ARGV[3])
if not l then return 0 end
unfile('ok', 'op', l)
unfile('rk', 'rp', l)
redis.call('ZREM', P .. ':exp', l.id)
redis.call('ZREM', P .. ':forget', l.id)
redis.call('DEL', LEASE .. l.id)
return 1
`;

/**
 * ARGV[3..4]: lease id, proposed token t. An administrator's break (BREAK on one Redis) with a
 * proposed token. Answers {'broken', lease, intents}, {'notfound'} (unknown or ended here; the
 * token taken all the same), {'stale', last} or {'epoch'}.
 */
export const BREAK_AT = `${PRELUDE}${TAKE_PROPOSED}
local id, t = ARGV[3], tonumber(ARGV[4])
-- The token first, whatever the lease: a fence token must be taken by a majority in one round,
-- and an instance where the lease already ended still takes it.
local took = take_proposed(t)
if took == nil then return {'epoch'} end
if took == false then return {'stale', redis.call('HGET', P .. ':floor', 'last')} end
local l = lease(id)
if not l or not is_open(l) then return {'notfound'} end
local now = clock(true)
if is_active(l, now) then
  -- 'brk': broken, not released by its holder (what a refusal of its holder later says).
  redis.call('HSET', LEASE .. id, 'rel', fmt(now), 'brk', fmt(now))
  end_lease(l, now, now)
else
  end_lease(l, l.exp, now)
end
return {'broken', redis.call('HGETALL', LEASE .. id), intents_under(l.b, l.k, l.p)}
`;

/**
 * ARGV[3..9]: intent id, kind ('fenced' | 'unfenced'), bucket, key, lease id, token, ceiling.
 * BEGIN_COMMIT of one Redis, except that an unfenced write's ceiling is the client's (the
 * highest counter of a majority) and the instance's counter is raised to it, so that any later
 * token read from a majority is above it. Answers {'ok', last}, {'epoch'} or {'refused', now, lease,
 * newer, covering}.
 */
export const BEGIN_COMMIT_AT = `${PRELUDE}${INTENT_STEPS}
local intent_id, kind, b, key, lid, tok = ARGV[3], ARGV[4], ARGV[5], ARGV[6], ARGV[7], tonumber(ARGV[8])
local ceiling = tonumber(ARGV[9])
local now = clock(true)
local last = floor_known()
if not last then return {'epoch'} end
if kind == 'unfenced' then
  local covering = active_overlapping(b, key, nil, now)
  if covering then return {'refused', fmt(now), {}, {}, covering.raw} end
else
  local refusal = fenced_intent_refusal(b, key, lid, tok, now)
  if refusal then return refusal end
end
if kind == 'unfenced' and ceiling > last then redis.call('HSET', P .. ':floor', 'last', fmt(ceiling)) end
file_intent(intent_id, kind, b, key, lid, tok, now)
return {'ok', redis.call('HGET', P .. ':floor', 'last')}
`;

/**
 * ARGV[3..]: a lease's fields (field, value, ...), as a majority holds it after a renewal.
 * Restores the lease on an instance that does not know it (one that lost its data and came
 * back): filed as open unless it is ended, so that this instance too stands in the way of an
 * overlapping grant. Answers 'restored', 'known' (it has the lease already) or 'conflict' (an
 * overlapping active lease is there: nothing changes).
 */
export const RESTORE = `${PRELUDE}
local fields = {}
local l = {}
for i = 3, #ARGV, 2 do
  fields[#fields + 1] = ARGV[i]; fields[#fields + 1] = ARGV[i + 1]
  l[ARGV[i]] = ARGV[i + 1]
end
l.tok = tonumber(l.tok)
l.exp = tonumber(l.exp)
if redis.call('EXISTS', LEASE .. l.id) == 1 then return 'known' end
local now = clock(false)
local other = active_overlapping(l.b, l.k, l.p, now)
if other then return 'conflict' end
redis.call('HSET', LEASE .. l.id, unpack(fields))
file('rk', 'rp', l)
if l['end'] == nil then
  file('ok', 'op', l)
  redis.call('ZADD', P .. ':exp', fmt(l.exp), l.id)
  redis.call('PEXPIRE', LEASE .. l.id, fmt(math.max(1, l.exp - now) + RETAIN + MARGIN))
else
  keep_until(l, tonumber(l['end']), now)
end
local last = floor_known()
if last and last < l.tok then redis.call('HSET', P .. ':floor', 'last', fmt(l.tok)) end
return 'restored'
`;
