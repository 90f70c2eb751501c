-- advance_schedule: compare-and-set of a schedule's next_run_at.
--
-- KEYS[1]  the store's hash tag
-- ARGV[1]  key   ARGV[2]  expected next_run_at   ARGV[3]  new next_run_at
-- Reply: 1 when advanced, 0 when the schedule is gone or the expectation is stale.
local sk = k_schedule(ARGV[1])
local current = redis.call('HGET', sk, 'next_run_at')
if (not current) or tonumber(current) ~= tonumber(ARGV[2]) then return 0 end
redis.call('HSET', sk, 'next_run_at', ARGV[3])
redis.call('ZADD', K_SCHEDULES, ARGV[3], ARGV[1])
return 1
