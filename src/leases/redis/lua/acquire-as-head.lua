--{{PRELUDE}}
--{{WAIT_LIB}}

local TICKET = string.sub(KEYS[2], #P + 5)
local tk = redis.call('HMGET', KEYS[2], 'b', 'kd', 's', 'dl', 'seq')
local now0 = clock(false)
if not tk[1] or tonumber(tk[4]) <= now0 then return {'gone'} end
if w_ahead(tk[1], tk[2], tk[3], tonumber(tk[5]), now0) then return {'behind'} end
local function acquire()
--{{ACQUIRE_BODY}}

end
local r = acquire()
if r[1] == 'granted' then
  w_drop(tk[1], TICKET)
  w_publish('held', w_heads(tk[1], tk[2], tk[3], now0, {}, {}), r[2])
end
return r
