-- fix_counter: mqcheck's repair of one O(1) state counter, compare-and-set.
--
-- KEYS[1]  the store's hash tag
-- ARGV[1]  counter field "<queue>|<state>"   ARGV[2]  the value mqcheck read
-- ARGV[3]  the value the rows call for
--
-- Reply: 1 when set, 0 when the counter moved since it was read (a live store:
-- nothing is written and the next check looks again).
local current = tonumber(redis.call('HGET', K_COUNTS, ARGV[1])) or 0
if current ~= tonumber(ARGV[2]) then return 0 end
redis.call('HSET', K_COUNTS, ARGV[1], ARGV[3])
return 1
