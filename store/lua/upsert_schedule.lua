-- upsert_schedule: create or replace a schedule by key.
--
-- KEYS[1]  the store's hash tag
-- ARGV[1]  key   ARGV[2]  next_run_at (used unless the cadence is unchanged)
-- ARGV[3..] field, value pairs of the record (JSON and numbers as strings;
--          absent fields are simply not sent)
--
-- Reply: the next_run_at in force after the upsert.  An unchanged cadence
-- (cron, tz and every_ms all equal) keeps the stored next_run_at, so a
-- deploy-time re-registration neither re-anchors an every-grid nor drops a
-- pending catch-up.  Publishes a wake for the schedule's queue.
local key = ARGV[1]
local sk = k_schedule(key)
local incoming = {}
for i = 3, #ARGV, 2 do incoming[ARGV[i]] = ARGV[i + 1] end
local next_run_at = ARGV[2]
local old = redis.call('HMGET', sk, 'cron', 'tz', 'every_ms', 'next_run_at')
if old[4] and (old[1] or '') == (incoming.cron or '') and (old[2] or '') == (incoming.tz or '')
    and (old[3] or '') == (incoming.every_ms or '') then
  next_run_at = old[4]
end
redis.call('DEL', sk)
local h = { 'key', key, 'next_run_at', next_run_at }
for i = 3, #ARGV do h[#h + 1] = ARGV[i] end
call_runs('HSET', sk, h, 1, #h, 2)
redis.call('ZADD', K_SCHEDULES, next_run_at, key)
if incoming.queue then wake(incoming.queue) end
return next_run_at
