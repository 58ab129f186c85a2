--{{PRELUDE}}
--{{INTENT_STEPS}}

local intent_id, kind, b, key, lid, tok = ARGV[3], ARGV[4], ARGV[5], ARGV[6], ARGV[7], tonumber(ARGV[8])
local now = clock(true)
-- The ceiling of an unfenced write is the last token taken: a floor Redis lost could make it
-- lower than a token already granted.
local last = floor_known()
if not last then return {'epoch'} end
-- During a quarantine after a loss of data, a lease Redis forgot may still cover the key.
local q = kind == 'unfenced' and quarantined(now)
if q then return {'quarantine', fmt(q)} end
local refusal = intent_refusal(kind, b, key, lid, tok, now)
if refusal then return refusal end
file_intent(intent_id, kind, b, key, lid, tok, now)
return {'ok', fmt(last)}
