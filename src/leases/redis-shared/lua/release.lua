--{{PRELUDE}}

local function wake_ended(l, now) end
--{{RELEASE_BODY}}
