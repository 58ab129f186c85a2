
local P = KEYS[1]
--{{AUDIT_APPEND}}

if not audit_ready() then return redis.error_reply('AUDITLOST the audit log counter is missing') end
-- ARGV[3]: a key under which an earlier record excludes this one ('' for none).
if ARGV[3] ~= '' and redis.call('EXISTS', P .. ':a:once:' .. ARGV[3]) == 1 then return 0 end
if not redis.call('SET', P .. ':a:once:' .. ARGV[1], '1', 'NX', 'EX', tonumber(ARGV[2])) then return 0 end
local r = {}
for i = 4, #ARGV, 2 do r[ARGV[i]] = ARGV[i + 1] end
return audit_append(r)
