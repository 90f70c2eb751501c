-- limits_adopt: count jobs that were already active when their queue became
-- limited (one page of the active set; set_queue_limits pages through it).
--
-- KEYS[1]  the store's hash tag
-- ARGV[1]  queue   ARGV[2..]  job ids (members of the active set)
--
-- Reply: the number of jobs counted.  A job of the queue that is active
-- (with a lock) is marked and scored by its lock expiry, as a claim of a
-- limited queue does; anything else is left alone.  Nothing happens when
-- the queue has no limits (any more).
local queue = ARGV[1]
if redis.call('HEXISTS', K_LIMIT.settings, queue) == 0 then return 0 end
local ak = K_LIMIT.active .. queue
local counted = 0
for i = 2, #ARGV do
  local id = ARGV[i]
  local f = redis.call('HMGET', k_job(id), 'state', 'queue', 'lock_expires_at')
  if f[1] == 'active' and f[2] == queue and f[3] then
    redis.call('HSET', k_job(id), 'lq', '1')
    redis.call('ZADD', ak, f[3], id)
    counted = counted + 1
  end
end
return counted
