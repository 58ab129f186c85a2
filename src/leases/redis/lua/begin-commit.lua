--{{PRELUDE}}
--{{INTENT_STEPS}}

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
