import { PRELUDE } from "./prelude.js";

/**
 * The two halves of a begin-commit script that one Redis and each Redlock instance share:
 * `fenced_intent_refusal` answers the refusal of a fenced write whose lease is not current (nil
 * when it is), `file_intent` records the intent by object, so that a grant finds the intents under
 * its resource without reading others. `put_intent` is the record itself, also used by the
 * Redlock repair to copy intents onto an instance that lost them.
 */
export const INTENT_STEPS = `
local function fenced_intent_refusal(b, key, lid, tok, now)
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
`;

/**
 * Commit intents (src/fence/commit.ts): the check that a write's lease is current and the record
 * of the write, in one script, so that no grant can land between them.
 *
 * ARGV[3..8]: intent id, kind ('fenced' | 'unfenced'), bucket, key, lease id, token.
 * Answers {'ok', ceiling}, {'epoch'} while the floor is unknown, or
 * {'refused', now, lease, newer, covering} with the facts the refusal rests on (empty when
 * absent), from which the store builds the same error as every other store (judgeIntent).
 */
export const BEGIN_COMMIT = `${PRELUDE}${INTENT_STEPS}
local intent_id, kind, b, key, lid, tok = ARGV[3], ARGV[4], ARGV[5], ARGV[6], ARGV[7], tonumber(ARGV[8])
local now = clock(true)
-- The ceiling of an unfenced write is the last token taken: a floor Redis lost could make it
-- lower than a token already granted.
local last = floor_known()
if not last then return {'epoch'} end
if kind == 'unfenced' then
  -- During a quarantine after a loss of data, a lease Redis forgot may still cover the key.
  local q = quarantined(now)
  if q then return {'quarantine', fmt(q)} end
  -- No active lease may cover a key written without a token.
  local covering = active_overlapping(b, key, nil, now)
  if covering then return {'refused', fmt(now), {}, {}, covering.raw} end
else
  local refusal = fenced_intent_refusal(b, key, lid, tok, now)
  if refusal then return refusal end
end
file_intent(intent_id, kind, b, key, lid, tok, now)
return {'ok', fmt(last)}
`;

/** ARGV[3..5]: kind ('k' | 'p'), bucket, key or prefix. Answers (id, bucket, key) triples. */
export const INTENTS_UNDER = `${PRELUDE}
if ARGV[3] == 'k' then return intents_under(ARGV[4], ARGV[5], nil) end
return intents_under(ARGV[4], nil, ARGV[5])
`;

/** ARGV[3..]: intent ids; unknown ones are ignored (endCommit and clearIntents alike). */
export const FORGET_INTENTS = `${PRELUDE}
for i = 3, #ARGV do forget_intent(ARGV[i]) end
return #ARGV - 2
`;
