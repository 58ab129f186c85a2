import { PRELUDE } from "./prelude.js";

// Scripts that make lease events take an event context after their own arguments (EVENT_ARGS in
// prelude.ts): with one, they append the events' audit records themselves, in the same step, and
// answer {'auditlost'} without changing anything while the audit log cannot take records; the
// last element of their answer is then the seq of the last record appended (0 for none).

/**
 * The lease scripts: each lease-store operation is one of these, run atomically by Redis. Each
 * starts with the prelude (key layout, clock, token floor, overlap lookups). A script that needs
 * a token and finds the floor unknown answers {'epoch'} and changes nothing; the store installs
 * a new epoch and runs it again.
 */

/**
 * ARGV[3..9]: kind ('k' | 'p'), bucket, key or prefix, owner, ttl ms, the new lease's id, the
 * principal ('' = none); ARGV[10..]: the event context. Answers {'granted', lease, expired, seq},
 * {'held', lease}, {'fence', token, intents}, {'epoch'} or {'auditlost'}.
 */
export const ACQUIRE = `${PRELUDE}
local kind, b, s, owner, ttl, id, principal = ARGV[3], ARGV[4], ARGV[5], ARGV[6], tonumber(ARGV[7]), ARGV[8], ARGV[9]
events_from(10)
if not events_ready() then return {'auditlost'} end
local key, prefix = nil, nil
if kind == 'k' then key = s else prefix = s end
local now = clock(true)
local q = quarantined(now)
if q then return {'quarantine', fmt(q)} end
-- Mutual exclusion: an active lease on an overlapping resource stands in the way (the one
-- with the lowest token, so that every replica names the same holder).
local held = active_overlapping(b, key, prefix, now)
if held then return {'held', held.raw} end
-- Commits of ended leases may still be in flight on objects this resource covers: nobody is
-- granted it before the caller has raised those objects' HCT above a fresh token.
local pending = intents_under(b, key, prefix)
if #pending > 0 then
  local tok = take_token()
  if not tok then return {'epoch'} end
  return {'fence', fmt(tok), pending}
end
-- The token and the lease in one step: a grant is never seen without its token taken.
local tok = take_token()
if not tok then return {'epoch'} end
-- Overlapping leases that expired unnoticed end for good now, before the grant, and are
-- reported with it: a clock stepped back cannot make them active beside the new lease.
local lapsed = {}
for _, o in ipairs(overlapping(true, b, key, prefix)) do
  if is_open(o) and o.exp <= now then lapsed[#lapsed + 1] = o end
end
table.sort(lapsed, by_token)
-- The records first (the expiries this grant saw, in token order, then the grant), then the
-- changes they record.
for _, o in ipairs(lapsed) do record_event(stored(o), 'LeaseExpired') end
record_event({id = id, b = b, k = key, p = prefix, o = owner, tok = fmt(tok)})
local expired = {}
for i, o in ipairs(lapsed) do
  end_lease(o, o.exp, now)
  expired[i] = redis.call('HGETALL', LEASE .. o.id)
end
local l = {id = id, b = b, k = key, p = prefix, tok = tok}
local fields = {'id', id, 'b', b, 'o', owner, 'tok', fmt(tok), 'ttl', fmt(ttl), 'acq', fmt(now),
  'exp', fmt(now + ttl)}
if key ~= nil then fields[#fields + 1] = 'k'; fields[#fields + 1] = key
else fields[#fields + 1] = 'p'; fields[#fields + 1] = prefix end
if principal ~= '' then fields[#fields + 1] = 'pr'; fields[#fields + 1] = principal end
redis.call('HSET', LEASE .. id, unpack(fields))
-- Open leases for overlap checks, remembered ones for findNewerOverlapping, expiry order for
-- collectExpired and list.
file('ok', 'op', l)
file('rk', 'rp', l)
redis.call('ZADD', P .. ':exp', fmt(now + ttl), id)
-- Redis's TTL is a backstop only: expiry is decided from 'exp' against the clock above.
redis.call('PEXPIRE', LEASE .. id, fmt(ttl + RETAIN + MARGIN))
return {'granted', redis.call('HGETALL', LEASE .. id), expired, SEQ}
`;

/**
 * ARGV[3..4]: lease id, ttl ms; ARGV[5..]: the event context. Only the lease's id reaches it: no
 * resource lookup. Answers {'ok', lease, seq}, {'notfound'}, {'released'}, {'broken'}, {'expired', exp} or
 * {'auditlost'}.
 */
export const RENEW = `${PRELUDE}
local id, ttl = ARGV[3], tonumber(ARGV[4])
events_from(5)
if not events_ready() then return {'auditlost'} end
local now = clock(true)
local l = lease(id)
if not l then return {'notfound'} end
if l.rel then return {l.brk and 'broken' or 'released'} end
-- An expired lease stays expired even if nobody took its resource: its holder must know.
if not is_active(l, now) then return {'expired', fmt(l.exp)} end
record_event(stored(l))
redis.call('HSET', LEASE .. id, 'exp', fmt(now + ttl), 'ttl', fmt(ttl))
redis.call('ZADD', P .. ':exp', fmt(now + ttl), id)
redis.call('PEXPIRE', LEASE .. id, fmt(ttl + RETAIN + MARGIN))
return {'ok', redis.call('HGETALL', LEASE .. id), SEQ}
`;

/**
 * The release script's body, after the prelude and a `wake_ended(l, now)` function: the plain
 * release defines it to do nothing; the shared wait queue's release-and-wake (wait-scripts.ts)
 * tells the waiters first in line in the same script, so that a release is one call.
 */
export const RELEASE_BODY = `local id = ARGV[3]
events_from(4)
if not events_ready() then return {'auditlost'} end
local l = lease(id)
if not l or not is_open(l) then return {'notfound'} end
local now = clock(true)
if not is_active(l, now) then
  record_event(stored(l), 'LeaseExpired')
  end_lease(l, l.exp, now)
  wake_ended(l, now)
  return {'expired', redis.call('HGETALL', LEASE .. id), SEQ}
end
record_event(stored(l))
redis.call('HSET', LEASE .. id, 'rel', fmt(now))
-- Out of the open indexes at once: the resource is free for the next grant. Still answerable
-- (get, findNewerOverlapping) until retention forgets it.
end_lease(l, now, now)
wake_ended(l, now)
return {'released', redis.call('HGETALL', LEASE .. id), SEQ}
`;

/**
 * ARGV[3]: lease id; ARGV[4..]: the event context. Answers {'released', lease, seq}, {'expired',
 * lease, seq} (it had expired unnoticed: its expiry is what gets reported), {'notfound'}
 * (unknown, or already seen to end) or {'auditlost'}.
 */
export const RELEASE = `${PRELUDE}
local function wake_ended(l, now) end
${RELEASE_BODY}`;

/**
 * ARGV[3]: the most leases to report at once; ARGV[4..]: the event context. Answers {'ok',
 * leases, seq} or {'auditlost'}.
 */
export const COLLECT_EXPIRED = `${PRELUDE}
events_from(4)
if not events_ready() then return {'auditlost'} end
local now = clock(true)
local ids = redis.call('ZRANGEBYSCORE', P .. ':exp', '-inf', fmt(now), 'LIMIT', 0, tonumber(ARGV[3]))
local out = {}
for _, id in ipairs(ids) do
  local l = lease(id)
  if l and is_open(l) and l.exp <= now then out[#out + 1] = l end
end
table.sort(out, by_token)
for _, l in ipairs(out) do record_event(stored(l)) end
-- Marked reported in the same step that reports (and records) it: one replica reports each
-- expiry once.
local reported = {}
for i, l in ipairs(out) do
  end_lease(l, l.exp, now)
  reported[i] = redis.call('HGETALL', LEASE .. l.id)
end
for _, id in ipairs(ids) do redis.call('ZREM', P .. ':exp', id) end
return {'ok', reported, SEQ}
`;

/**
 * ARGV[3]: the most due leases to look at. Forgets leases that ended at least the retention ago,
 * in token order, each only once no older overlapping lease stays remembered (the rule of
 * selectForgettable in src/leases/embedded/retention.ts): findNewerOverlapping of a remembered
 * lease must never miss its successor.
 */
export const SWEEP = `${PRELUDE}
local now = clock(false)
local ids = redis.call('ZRANGEBYSCORE', P .. ':forget', '-inf', fmt(now), 'LIMIT', 0, tonumber(ARGV[3]))
local due = {}
for _, id in ipairs(ids) do
  local l = lease(id)
  if l then due[#due + 1] = l else redis.call('ZREM', P .. ':forget', id) end
end
table.sort(due, by_token)
local forgotten = 0
for _, l in ipairs(due) do
  local older = lowest(overlapping(false, l.b, l.k, l.p), function(o) return o.tok < l.tok end)
  if not older then
    unfile('rk', 'rp', l)
    forget_delegates(l.id)
    redis.call('DEL', LEASE .. l.id)
    redis.call('ZREM', P .. ':forget', l.id)
    forgotten = forgotten + 1
  end
end
return forgotten
`;

/** ARGV[3]: lease id. */
export const GET = `${PRELUDE}
return redis.call('HGETALL', LEASE .. ARGV[3])
`;

/** ARGV[3..6]: bucket, '1' when the bucket filters, prefix, '1' when the prefix filters. */
export const LIST = `${PRELUDE}
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
`;

/** ARGV[3..4]: bucket, key. */
export const FIND_COVERING = `${PRELUDE}
local l = active_overlapping(ARGV[3], ARGV[4], nil, clock(false))
if l then return l.raw end
return {}
`;

/** ARGV[3..6]: kind ('k' | 'p'), bucket, key or prefix, token of the lease asked about. */
export const FIND_NEWER = `${PRELUDE}
local l = {b = ARGV[4], tok = tonumber(ARGV[6])}
if ARGV[3] == 'k' then l.k = ARGV[5] else l.p = ARGV[5] end
local n = newer_overlapping(l)
if n then return n.raw end
return {}
`;

/**
 * ARGV[3..4]: the epoch to install, the quarantine (ms) after a loss of data (0 = none). Installs
 * it when it is above the floor's epoch: the counter
 * starts over at epoch × 2^32, above every token of every earlier epoch. An equal or higher
 * epoch already installed in this server's lifetime is kept ('current'); one installed before a
 * restart is not enough ('stale': the caller must create a higher one).
 */
export const INSTALL_EPOCH = `${PRELUDE}
local e, quarantine = tonumber(ARGV[3]), tonumber(ARGV[4])
local f = redis.call('HMGET', P .. ':floor', 'runid', 'epoch')
local run = current_runid()
if f[2] and tonumber(f[2]) >= e then
  if f[1] == run then return {'current', f[2]} end
  return {'stale', f[2]}
end
redis.call('HSET', P .. ':floor', 'epoch', fmt(e), 'last', fmt(e * EPOCH_SPAN), 'runid', run)
-- A floor missing or left by another run of the server means data was lost (a used-up counter
-- keeps its run id): leases granted before may still be held.
if quarantine > 0 and f[1] ~= run then
  redis.call('HSET', P .. ':floor', 'q', fmt(clock(true) + quarantine))
end
return {'installed', fmt(e)}
`;

/**
 * ARGV[3]: lease id; ARGV[4..]: the event context. An administrator's break: ends the lease
 * (released if active, its expiry reported if it had expired unnoticed) and, in the same step,
 * takes a fresh token and lists the intents under its resource, for the caller to fence at once.
 * Answers {'broken', lease, token, intents, seq}, {'notfound'}, {'epoch'} or {'auditlost'}.
 */
export const BREAK = `${PRELUDE}
local id = ARGV[3]
events_from(4)
if not events_ready() then return {'auditlost'} end
local l = lease(id)
if not l or not is_open(l) then return {'notfound'} end
local now = clock(true)
-- The token first: while the floor is unknown nothing changes.
local tok = take_token()
if not tok then return {'epoch'} end
if is_active(l, now) then
  record_event(stored(l))
  -- 'brk': broken, not released by its holder (what a refusal of its holder later says).
  redis.call('HSET', LEASE .. id, 'rel', fmt(now), 'brk', fmt(now))
  end_lease(l, now, now)
else
  -- It had ended by expiry: that is recorded first, then the administrator's act.
  record_event(stored(l), 'LeaseExpired')
  record_event(stored(l))
  end_lease(l, l.exp, now)
end
return {'broken', redis.call('HGETALL', LEASE .. id), fmt(tok), intents_under(l.b, l.k, l.p), SEQ}
`;
