
local P = KEYS[1]
--{{AUDIT_APPEND}}

if not audit_ready() then return redis.error_reply('AUDITLOST the audit log counter is missing') end
if not redis.call('SET', P .. ':a:once:' .. ARGV[1], '1', 'NX', 'EX', tonumber(ARGV[2])) then return 0 end
local r = {}
for i = 3, #ARGV, 2 do r[ARGV[i]] = ARGV[i + 1] end
return audit_append(r)
