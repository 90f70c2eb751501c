-- Flow parents parked in waiting-children, per queue, so they can be listed exactly:
--
--   <tag>:parked:<queue>   zset  parent id -> processed_at (the start of its fan-out run)
--
-- Written where a parent parks (fan_out) and cleared wherever it leaves that state
-- (unlink_from_state, which terminal transitions and make_waiting call; delete_job).
-- (k_parked is in lib/keys.lua.)
--
-- And the flow parents that settled lately, so a dashboard can list them without
-- scanning the finished sets:
--
--   <tag>:flows:settled    zset  parent id -> finished_at, only the newest
--                          FLOWS_SETTLED_CAP (store/keys.py, same name)
--
-- Written where a parent with a manifest reaches a terminal state (finish); a parent
-- leaves it when it leaves that state (retry, through unpark) or is deleted.
local FLOWS_SETTLED_CAP = 1000

local function park(id, j, now)
  redis.call('ZADD', k_parked(j.queue), tonumber(j.processed_at) or now, id)
end

local function unpark(id, j)
  if j.state == 'waiting-children' then
    redis.call('ZREM', k_parked(j.queue), id)
  elseif j.has_flow then
    redis.call('ZREM', K_LIMIT.settled, id)
  end
end

-- A flow parent reached a terminal state: note it, keeping only the newest.
local function note_settled(id, now)
  redis.call('ZADD', K_LIMIT.settled, now, id)
  redis.call('ZREMRANGEBYRANK', K_LIMIT.settled, 0, -FLOWS_SETTLED_CAP - 1)
end
