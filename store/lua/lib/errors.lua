-- Per-error aggregates, kept when a job fails (ack with a Fail outcome, or stall
-- recovery giving up), so the dashboard's failures view never scans jobs.
--
--   <tag>:errors             zset  group id -> last seen (ms); at most ERRORS_MAX_GROUPS
--   <tag>:error:<gid>        hash  type, module, message (first sample), count,
--                                  first_seen, last_seen, last_job, last_queue, last_name
--   <tag>:error:<gid>:jobs   zset  job id -> finished_at of its failure; the newest
--                                  ERRORS_MAX_JOBS (older ids and orphans are dropped)
--
-- The job's row remembers its group (hidden field error_group) so that deleting
-- the job (remove, retention, sweeps) also drops it from the group (forget_error).
--
-- A group is one error type with one message, digits folded ("row 3" and "row 7"
-- are the same error).  When a new group would exceed the cap, the group seen
-- longest ago is evicted with its job set.
local ERRORS_MAX_GROUPS = 1000
local ERRORS_MAX_JOBS = 10000
local ERROR_MESSAGE_MAX = 300

-- (type, module, message) of a failure exit {"error": {...}}, else of a reason text.
local function error_shape(exit_json, reason)
  if exit_json then
    local ok, doc = pcall(cjson.decode, exit_json)
    if ok and type(doc) == 'table' and type(doc.error) == 'table' then
      local e = doc.error
      local t = type(e.type) == 'string' and e.type or 'Error'
      local m = type(e.message) == 'string' and e.message or ''
      local mod = type(e.module) == 'string' and e.module or ''
      return t, mod, m
    end
    return '(exit)', '', string.sub(exit_json, 1, ERROR_MESSAGE_MAX)
  end
  return '(no exit)', '', reason or ''
end

-- Count a failure of job id (its snapshot j); call it before the terminal transition,
-- so a keep policy that prunes the job at once also takes it out of the group.
local function record_error(id, j, exit_json, reason, now)
  local etype, emodule, message = error_shape(exit_json, reason)
  message = string.sub(message, 1, ERROR_MESSAGE_MAX)
  local folded = string.gsub(message, '%d+', '#')
  local gid = string.sub(redis.sha1hex(emodule .. NUL .. etype .. NUL .. folded), 1, 16)
  local ek = k_error(gid)
  local index = k_errors()
  if redis.call('EXISTS', ek) == 0 then
    if redis.call('ZCARD', index) >= ERRORS_MAX_GROUPS then
      local oldest = redis.call('ZRANGE', index, 0, 0)[1]
      if oldest then
        redis.call('ZREM', index, oldest)
        redis.call('DEL', k_error(oldest), k_error_jobs(oldest))
      end
    end
    redis.call('HSET', ek, 'type', etype, 'module', emodule, 'message', message,
      'first_seen', fmt(now), 'count', '0')
  end
  redis.call('HINCRBY', ek, 'count', 1)
  redis.call('HSET', ek, 'last_seen', fmt(now), 'last_job', id, 'last_queue', j.queue,
    'last_name', j.name)
  redis.call('ZADD', index, now, gid)
  redis.call('HSET', k_job(id), 'error_group', gid)
  local jobs = k_error_jobs(gid)
  redis.call('ZADD', jobs, now, id)
  local kept = redis.call('ZCARD', jobs)
  if kept > ERRORS_MAX_JOBS then
    redis.call('ZREMRANGEBYRANK', jobs, 0, kept - ERRORS_MAX_JOBS - 1)
  end
end

-- A job row is being deleted: take it out of its error group.
local function forget_error(id, gid)
  if not gid then return end
  redis.call('ZREM', k_error_jobs(gid), id)
  if redis.call('HGET', k_error(gid), 'last_job') == id then
    redis.call('HDEL', k_error(gid), 'last_job')
  end
end
