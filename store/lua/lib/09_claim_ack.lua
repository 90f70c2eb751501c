-- claim and ack, shared by claim.lua, ack.lua and ack_claim.lua (a worker's
-- "finish this job and fetch the next" in one round trip).

local PROMOTE_LIMIT = 200
local NEXT_RUN_SCAN = 200

-- Claim: promote due delayed jobs of the queue (bounded, for every name and
-- even while paused), then take the best waiting job whose name is in names.
-- Returns {'claimed', id, pairs} or {'empty', next_run_at or ''}.  Work per
-- call is bounded: at most PROMOTE_LIMIT promotions and NEXT_RUN_SCAN delayed
-- members examined; the best waiting job is the head of one zset per name.
local function claim_next(now, token, lock_ms, queue, names)
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

  -- The earliest run_at among delayed jobs with a handled name.  If the
  -- bounded scan finds none but more members remain, the last examined score
  -- is a safe early wake-up (the caller simply claims again then).
  local handled = {}
  for _, name in ipairs(names) do handled[name] = true end
  local function next_run_at()
    local page = redis.call('ZRANGE', dk, 0, NEXT_RUN_SCAN - 1, 'WITHSCORES')
    for i = 1, #page, 2 do
      local name = redis.call('HGET', k_job(page[i]), 'name')
      if name and handled[name] then return page[i + 1] end
    end
    if #page >= NEXT_RUN_SCAN * 2 then return page[#page] end
    return ''
  end

  if #names == 0 or redis.call('SISMEMBER', K_PAUSED, queue) == 1 then
    return { 'empty', next_run_at() }
  end

  -- Seqs are unique and zero-padded, so comparing members compares seqs.
  local best_key, best_member, best_score
  for _, name in ipairs(names) do
    local wk = k_waiting(queue, name)
    local top = redis.call('ZRANGE', wk, 0, 0, 'WITHSCORES')
    if #top > 0 then
      local score = tonumber(top[2])
      if best_member == nil or score < best_score or (score == best_score and top[1] < best_member) then
        best_key, best_member, best_score = wk, top[1], score
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
end

-- Ack: record the outcome of a held run.  outcome is 'complete' | 'fail' |
-- 'cancelled' | 'retry'; exit_json is raw JSON or nil.  Every outcome consumes
-- an attempt.  Complete and Fail store the exit and win over a pending
-- cancel; Retry on a cancel-requested job ends it cancelled.
-- Returns {'ok', queue}, {'notfound'} or {'locklost'}.
local function ack_job(now, id, token, outcome, exit_json, retry_delay)
  local j = snapshot(id)
  if not j then return { 'notfound' } end
  if j.state ~= 'active' or j.lock_token ~= token then return { 'locklost' } end

  local jk = k_job(id)
  redis.call('HINCRBY', jk, 'attempts_made', 1)
  if outcome == 'complete' then
    finish(id, j, 'completed', { store_exit = true, exit_json = exit_json, ledger_exit = exit_json }, now)
  elseif outcome == 'fail' then
    record_error(id, j, exit_json, nil, now)
    finish(id, j, 'failed', { store_exit = true, exit_json = exit_json, ledger_exit = exit_json }, now)
  elseif outcome == 'cancelled' or j.cancel_requested then
    finish_cancelled(id, j, now)
  else
    -- Retry: back of the line with a fresh seq, after the delay.
    local delay = math.max(0, retry_delay)
    append_attempt(id, 'retried', j.processed_at, now, exit_json)
    local seq = redis.call('INCR', K_SEQ)
    if delay > 0 then
      redis.call('ZREM', K_ACTIVE, id)
      redis.call('HSET', jk, 'state', 'delayed', 'seq', fmt(seq), 'run_at', fmt(now + delay))
      redis.call('HDEL', jk, 'lock_token', 'lock_expires_at')
      redis.call('ZADD', k_delayed(j.queue), now + delay, id)
      counts_add(j.queue, 'active', -1)
      counts_add(j.queue, 'delayed', 1)
    else
      make_waiting(id, j, seq, now, now)
    end
    wake(j.queue)
  end
  return { 'ok', j.queue }
end
