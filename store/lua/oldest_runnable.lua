-- oldest_runnable: the waiting job of one queue that has been runnable longest.
--
-- KEYS[1]  the store's hash tag
-- ARGV[1]  queue   ARGV[2]  priority levels to visit per waiting set
-- ARGV[3]  members to read at the head of each level   ARGV[4..]  the queue's job names
--
-- A waiting set is scored by -priority and, within one score, ordered by arrival
-- sequence, so its head is the next job to claim, not the oldest: a low-priority job
-- can wait behind a stream of higher ones.  Every priority level's head is a
-- candidate (the first members of each level, at most ARGV[2] levels per set); the
-- candidate with the smallest run_at wins.
--
-- Reply: {id or '', run_at or '', candidates examined, '1' if some set had more
--         levels than visited else '0'}
local queue = ARGV[1]
local max_levels = tonumber(ARGV[2])
local per_level = tonumber(ARGV[3])
local best_id, best_run = nil, nil
local examined, truncated = 0, '0'

local function consider(member)
  local id = string.sub(member, WAITING_SEQ_WIDTH + 1)
  -- run_at is absent while it equals enqueued_at (layout 2, see insert_job).
  local f = redis.call('HMGET', k_job(id), 'run_at', 'enqueued_at')
  local run_at = tonumber(f[1] or f[2] or '')
  examined = examined + 1
  if run_at and (best_run == nil or run_at < best_run or (run_at == best_run and id < best_id)) then
    best_id, best_run = id, run_at
  end
end

-- Each name's waiting set and its set of grouped waiting jobs (lib/limits.lua).
for i = 4, #ARGV do
  for _, key in ipairs({ k_waiting(queue, ARGV[i]), K_LIMIT.gwaiting .. queue .. NUL .. ARGV[i] }) do
    local page = redis.call('ZRANGE', key, 0, per_level - 1, 'WITHSCORES')
    local levels = 0
    while #page > 0 do
      levels = levels + 1
      local level_score = page[2]
      for j = 1, #page, 2 do
        if page[j + 1] == level_score then consider(page[j]) end
      end
      if levels >= max_levels then
        if redis.call('ZCOUNT', key, '(' .. level_score, '+inf') > 0 then truncated = '1' end
        break
      end
      page = redis.call('ZRANGEBYSCORE', key, '(' .. level_score, '+inf', 'WITHSCORES', 'LIMIT', 0, per_level)
    end
  end
end
return { best_id or '', best_run and string.format('%d', best_run) or '', examined, truncated }
