--{{PRELUDE}}
--{{INTENT_STEPS}}
--{{RESTORE_INTENTS}}

if not floor_known() then return {'unknown'} end
local f = redis.call('HMGET', P .. ':floor', 'q', 'ip')
if f[2] ~= '1' then return {'settled'} end
local q = tonumber(f[1] or '0')
if clock(false) < q then return {'early', fmt(q)} end
restore_intents(3)
redis.call('HDEL', P .. ':floor', 'ip')
return {'settled'}
