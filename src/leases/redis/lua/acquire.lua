--{{PRELUDE}}

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
local lapsed = lapsed_overlapping(b, key, prefix, now)
-- The records first (the expiries this grant saw, in token order, then the grant), then the
-- changes they record.
for _, o in ipairs(lapsed) do record_event(stored(o), 'LeaseExpired') end
record_event({id = id, b = b, k = key, p = prefix, o = owner, tok = fmt(tok)})
local expired = end_expired(lapsed, now)
return {'granted', grant(id, b, key, prefix, owner, principal, tok, ttl, now), expired, SEQ}
