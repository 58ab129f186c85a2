--{{PRELUDE}}

local f = redis.call('HMGET', P .. ':floor', 'last', 'epoch', 'q', 'ip')
local run = current_runid()
local last, epoch = floor_known()
if not last then return {'unknown', '0', '-1', '0', run, '0'} end
return {'ok', fmt(last), fmt(epoch), f[3] or '0', run, f[4] or '0'}
