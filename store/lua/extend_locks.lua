-- extend_locks: the heartbeat for a chunk (at most 500) of held locks.
--
-- KEYS[1]  the store's hash tag
-- ARGV[1]  now   ARGV[2]  duration ms   ARGV[3..]  id, token pairs
--
-- Reply: {lost ids, cancel-requested ids}.  A lock whose job carries a
-- cancel request is reported and NOT extended.  A lock whose row is gone is
-- lost (its dangling active member is left to recover_stalled).
local now = tonumber(ARGV[1])
local expires = now + tonumber(ARGV[2])
local lost, cancel = {}, {}
for i = 3, #ARGV, 2 do
  local id, token = ARGV[i], ARGV[i + 1]
  local f = redis.call('HMGET', k_job(id), 'state', 'lock_token', 'cancel_requested', 'queue', 'lq', 'group')
  if f[1] ~= 'active' or f[2] ~= token or not f[4] then
    lost[#lost + 1] = id
  elseif f[3] == '1' then
    cancel[#cancel + 1] = id
  else
    redis.call('HSET', k_job(id), 'lock_expires_at', fmt(expires))
    redis.call('ZADD', K_ACTIVE, expires, id)
    -- A claim of a limited queue holds its slot (and its group's) while the lock lives.
    -- ('lq' '1': counted in the queue; '1' or 'g', in its group; lib/limits.lua).
    if f[5] == '1' then redis.call('ZADD', K_LIMIT.active .. f[4], expires, id) end
    if f[5] and f[6] then redis.call('ZADD', K_LIMIT.gactive .. f[4] .. NUL .. f[6], expires, id) end
  end
end
return { lost, cancel }
