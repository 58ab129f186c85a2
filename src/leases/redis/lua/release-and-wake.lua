--{{PRELUDE}}
--{{WAIT_LIB}}

local function wake_ended(l, now)
  local kd, s = 'k', l.k
  if s == nil then kd, s = 'p', l.p end
  w_publish('ended', w_heads(l.b, kd, s, now, {}, {}), nil)
end
--{{RELEASE_BODY}}
