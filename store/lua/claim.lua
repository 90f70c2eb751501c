-- claim: take the best waiting job of a queue whose name the caller handles.
--
-- KEYS[1]  the store's hash tag
-- ARGV[1]  now   ARGV[2]  token   ARGV[3]  lock duration ms
-- ARGV[4]  queue   ARGV[5..]  the job names this caller handles
--
-- Reply: {'claimed', id, <HGETALL pairs>} | {'empty', next_run_at or ''} |
-- {'again', ''} (claim again; owed promotions come as '!owed'; see claim_next
-- in lib/claim_ack.lua).
local names = {}
for i = 5, #ARGV do names[#names + 1] = ARGV[i] end
return with_owed(claim_next(tonumber(ARGV[1]), ARGV[2], tonumber(ARGV[3]), ARGV[4], names))
