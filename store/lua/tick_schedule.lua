-- tick_schedule: claim one occurrence of a schedule, atomically.
--
-- KEYS[1]  the store's hash tag
-- ARGV[1]  now   ARGV[2]  index flags   ARGV[3]  schedule key
-- ARGV[4]  expected next_run_at (the slot)   ARGV[5]  new next_run_at
-- ARGV[6..11]  the tick job's request (see read_request; mode 'user')
--
-- Reply: 1 when the occurrence fired (job inserted, queue woken), 0 when the
-- expectation was stale (nothing written) or the slot's job already exists
-- (advanced, nothing inserted).  Exactly-once per slot rests on the CAS, not
-- on the slot job still existing.
local now = tonumber(ARGV[1])
local sk = k_schedule(ARGV[3])
local current = redis.call('HGET', sk, 'next_run_at')
if (not current) or tonumber(current) ~= tonumber(ARGV[4]) then return 0 end
redis.call('HSET', sk, 'next_run_at', ARGV[5])
redis.call('ZADD', K_SCHEDULES, ARGV[5], ARGV[3])
local r = read_request(6, nil)
if redis.call('EXISTS', k_job(r.id)) == 1 then return 0 end
insert_job(r.id, r, '', now, ARGV[2], nil, nil)
return 1
