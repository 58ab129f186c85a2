
local P = KEYS[1]
--{{AUDIT_APPEND}}

-- A log whose counter is gone takes nothing until the gateway has restored it.
if not audit_ready() then return redis.error_reply('AUDITLOST the audit log counter is missing') end
local r = {}
for i = 1, #ARGV, 2 do r[ARGV[i]] = ARGV[i + 1] end
return audit_append(r)
