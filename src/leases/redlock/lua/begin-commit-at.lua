--{{PRELUDE}}
--{{INTENT_STEPS}}

local intent_id, kind, b, key, lid, tok = ARGV[3], ARGV[4], ARGV[5], ARGV[6], ARGV[7], tonumber(ARGV[8])
local ceiling = tonumber(ARGV[9])
local now = clock(true)
local last = floor_known()
if not last then return {'epoch'} end
local refusal = intent_refusal(kind, b, key, lid, tok, now)
if refusal then return refusal end
if kind == 'unfenced' and ceiling > last then redis.call('HSET', P .. ':floor', 'last', fmt(ceiling)) end
file_intent(intent_id, kind, b, key, lid, tok, now)
return {'ok', redis.call('HGET', P .. ':floor', 'last')}
