-- The dedupe registry: one hash per (name, key) holding job_id and, for window
-- entries, expires_at.  Pending-mode entries (no expires_at) are indexed in a
-- lex-ordered zset so the sweep can cursor through all of them; window entries
-- in a zset scored by their window end.

local function dedupe_unregister(member)
  redis.call('DEL', k_dedupe(member))
  redis.call('ZREM', K_DEDUPE_WINDOWS, member)
  redis.call('ZREM', K_DEDUPE_PENDING, member)
end

-- expires_at: a number (window end) or nil (pending mode).
local function dedupe_register(member, job_id, expires_at)
  local dk = k_dedupe(member)
  redis.call('DEL', dk)
  if expires_at then
    redis.call('HSET', dk, 'job_id', job_id, 'expires_at', fmt(expires_at))
    redis.call('ZREM', K_DEDUPE_PENDING, member)
    redis.call('ZADD', K_DEDUPE_WINDOWS, expires_at, member)
  else
    redis.call('HSET', dk, 'job_id', job_id)
    redis.call('ZREM', K_DEDUPE_WINDOWS, member)
    redis.call('ZADD', K_DEDUPE_PENDING, 0, member)
  end
end

-- A terminal transition frees the key when the entry points at this job and is
-- pending-mode or its window already ended.  A live window outlives its job.
local function release_dedupe(name, dedupe_key, id, now)
  if not dedupe_key then return end
  local member = dedupe_member(name, dedupe_key)
  local f = redis.call('HMGET', k_dedupe(member), 'job_id', 'expires_at')
  if f[1] ~= id then return end
  if (not f[2]) or tonumber(f[2]) <= now then dedupe_unregister(member) end
end
