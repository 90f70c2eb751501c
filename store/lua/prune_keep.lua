-- prune_keep: one more bounded keep pass over a (name, state) group, for work a
-- terminal transition reported as owed.
--
-- KEYS[1]  the store's hash tag
-- ARGV[1]  now   ARGV[2]  job name   ARGV[3]  state   ARGV[4]  the keep JSON
--
-- Reply: 1 while the group may still be over its rule, else 0.
local rule = keep_rule(ARGV[4], ARGV[3])
if not rule then return 0 end
if apply_keep_once(ARGV[2], ARGV[3], rule, tonumber(ARGV[1])) then return 1 end
return 0
