-- frontall.lua: a stand-in for fair.lua's fronts, built in with the tag
-- admitq_frontfloor. Every grant from the line of a capped tenant with
-- tasks in flight goes in at the front of the queue, whether or not its cap
-- holds it below its share: the placement a dispatcher that knew each
-- tenant's share would give the capped tenant of admitq bench's busy
-- queue. It is a floor for that measure, not a rule: tenants whose caps do
-- not bind would pass everyone else's tasks.
local function fronts(cap, n)
  return cap > 0 and n > 0
end
