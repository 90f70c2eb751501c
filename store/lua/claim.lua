-- claim: promote due delayed jobs of the queue (bounded), then take the best
-- waiting job whose name the caller handles.
--
-- KEYS[1]  the store's hash tag
-- ARGV[1]  now   ARGV[2]  token   ARGV[3]  lock duration ms
-- ARGV[4]  queue   ARGV[5..]  the job names this caller handles
--
-- Reply: {'claimed', id, <HGETALL pairs>} | {'empty', next_run_at or ''}
-- Work per call is bounded: at most PROMOTE_LIMIT promotions and at most
-- NEXT_RUN_SCAN delayed members examined for next_run_at; the best waiting job
-- is the head of one zset per name (priority desc, then FIFO).
local PROMOTE_LIMIT = 200
local NEXT_RUN_SCAN = 200
local now = tonumber(ARGV[1])
local token = ARGV[2]
local lock_ms = tonumber(ARGV[3])
local queue = ARGV[4]
local dk = k_delayed(queue)

local due = redis.call('ZRANGEBYSCORE', dk, '-inf', now, 'LIMIT', 0, PROMOTE_LIMIT)
for _, id in ipairs(due) do
  redis.call('ZREM', dk, id)
  local f = redis.call('HMGET', k_job(id), 'name', 'priority', 'seq')
  if f[1] then
    redis.call('HSET', k_job(id), 'state', 'waiting')
    add_waiting(queue, f[1], f[2] or '0', f[3], id)
    counts_add(queue, 'delayed', -1)
    counts_add(queue, 'waiting', 1)
  end
end

-- The earliest run_at among delayed jobs with a handled name.  If the bounded
-- scan finds none but more members remain, the last examined score is a safe
-- early wake-up (the caller simply claims again then).
local names = {}
for i = 5, #ARGV do names[ARGV[i]] = true end
local function next_run_at()
  local page = redis.call('ZRANGE', dk, 0, NEXT_RUN_SCAN - 1, 'WITHSCORES')
  for i = 1, #page, 2 do
    local name = redis.call('HGET', k_job(page[i]), 'name')
    if name and names[name] then return page[i + 1] end
  end
  if #page >= NEXT_RUN_SCAN * 2 then return page[#page] end
  return ''
end

if #ARGV < 5 or redis.call('SISMEMBER', K_PAUSED, queue) == 1 then
  return { 'empty', next_run_at() }
end

local best_key, best_member, best_score, best_name
for i = 5, #ARGV do
  local wk = k_waiting(queue, ARGV[i])
  local top = redis.call('ZRANGE', wk, 0, 0, 'WITHSCORES')
  if #top > 0 then
    local score = tonumber(top[2])
    if best_member == nil or score < best_score or (score == best_score and top[1] < best_member) then
      best_key, best_member, best_score, best_name = wk, top[1], score, ARGV[i]
    end
  end
end
if not best_member then return { 'empty', next_run_at() } end

local id = string.sub(best_member, 17)
local jk = k_job(id)
local expires = now + lock_ms
redis.call('ZREM', best_key, best_member)
redis.call('HSET', jk, 'state', 'active', 'lock_token', token,
  'lock_expires_at', fmt(expires), 'processed_at', fmt(now))
redis.call('ZADD', K_ACTIVE, expires, id)
counts_add(queue, 'waiting', -1)
counts_add(queue, 'active', 1)
return { 'claimed', id, redis.call('HGETALL', jk) }
