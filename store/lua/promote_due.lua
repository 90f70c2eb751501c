-- promote_due: promote one bounded page of a queue's due delayed jobs (owed
-- work of a claim that found more due jobs than it may promote).
--
-- KEYS[1]  the store's hash tag
-- ARGV[1]  now   ARGV[2]  queue   ARGV[3]  page size (at most 500)
--
-- Reply: 1 while more due jobs may remain, else 0.
local _, more = promote_due(ARGV[2], tonumber(ARGV[1]), tonumber(ARGV[3]))
if more then return 1 end
return 0
