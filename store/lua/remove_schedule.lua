-- remove_schedule: delete a schedule.
--
-- KEYS[1]  the store's hash tag   ARGV[1]  key
-- Reply: 1 if it existed, else 0.
local removed = redis.call('ZREM', K_SCHEDULES, ARGV[1])
redis.call('DEL', k_schedule(ARGV[1]))
return removed
