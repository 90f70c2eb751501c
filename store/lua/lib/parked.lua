-- Flow parents parked in waiting-children, per queue, so they can be listed exactly:
--
--   <tag>:parked:<queue>   zset  parent id -> processed_at (the start of its fan-out run)
--
-- Written where a parent parks (fan_out) and cleared wherever it leaves that state
-- (unlink_from_state, which terminal transitions and make_waiting call; delete_job).
-- (k_parked is in lib/keys.lua.)

local function park(id, j, now)
  redis.call('ZADD', k_parked(j.queue), tonumber(j.processed_at) or now, id)
end

local function unpark(id, j)
  if j.state == 'waiting-children' then redis.call('ZREM', k_parked(j.queue), id) end
end
