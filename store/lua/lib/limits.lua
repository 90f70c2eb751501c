-- Flow control: queue limits checked inside the claim (docs/flow-control.md).
--
-- K_LIMIT.settings field <queue> holds a limited queue's settings, written by
-- set_limits.lua: "<concurrency>:<rate limit>:<rate period ms>", '' for a kind
-- that is not limited.  A queue without a field costs its claims one HGET.
--
-- Concurrency is counted by lock expiry: a claim of a limited queue adds the
-- job to K_LIMIT.active .. queue, scored by its lock expiry and marks the row
-- ('lq' = '1'); the heartbeat moves the score, every exit from active removes
-- it.  Only members whose lock has not expired count, so a crashed worker's
-- slot frees when its lock expires, before stall recovery runs.
--
-- The rate is a GCRA without burst tolerance: the theoretical arrival time of
-- the next claim is the last claim plus per_ms / limit, compared in integers
-- ((now - last) * limit >= per_ms), so claims are spread evenly and no window
-- of per_ms ms, wherever it starts, holds more than limit claims.
--
-- One table holds the helpers (the joined library keeps its locals few).
-- This file comes before owed.lua: with_owed, which ends every script that
-- can free a slot, publishes the slot-freed wakes (LIMITS.flush).
local LIMITS = { freed = {} }

function LIMITS.fmt(n) return string.format('%.0f', n) end

-- The settings of queue, or nil when it has none.
function LIMITS.read(queue)
  local s = redis.call('HGET', K_LIMIT.settings, queue)
  if not s then return nil end
  local f, i = {}, 0
  for part in string.gmatch(s .. ':', '([^:]*):') do
    i = i + 1
    f[i] = tonumber(part)
  end
  return { concurrency = f[1], rate_limit = f[2], rate_per = f[3] }
end

-- The first ms at which the rate admits a claim (<= now: admits now).
function LIMITS.rate_free_at(lim, queue, now)
  local last = tonumber(redis.call('HGET', K_LIMIT.rate, queue) or '')
  if not last or (now - last) * lim.rate_limit >= lim.rate_per then return now end
  return last + math.ceil(lim.rate_per / lim.rate_limit)
end

-- The earliest lock expiry among the claims that count, when they fill every
-- slot (nil: a slot is free).
function LIMITS.full_until(lim, queue, now)
  local ak = K_LIMIT.active .. queue
  local live = '(' .. LIMITS.fmt(now)
  if redis.call('ZCOUNT', ak, live, '+inf') < lim.concurrency then return nil end
  local first = redis.call('ZRANGEBYSCORE', ak, live, '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
  return tonumber(first[2])
end

-- nil when a claim of queue may go ahead now, else (until, reason): the ms
-- when the limit next admits one, and 'concurrency' or 'rate'.  A claim that
-- finds every slot taken marks the queue, so that acks of its jobs wake one
-- waiting claimer (see LIMITS.leave).
function LIMITS.blocked(lim, queue, now)
  local until_ms, reason
  if lim.concurrency then
    until_ms = LIMITS.full_until(lim, queue, now)
    if until_ms then
      reason = 'concurrency'
      redis.call('SADD', K_LIMIT.blocked, queue)
    end
  end
  if lim.rate_limit then
    local free_at = LIMITS.rate_free_at(lim, queue, now)
    if free_at > now and (not until_ms or free_at > until_ms) then
      -- Claimers held back by the rate since its last claim are told
      -- successive slots (the n-th: free_at + (n - 1) * spacing), so they do
      -- not all wake at free_at to race for one token.
      local n = redis.call('HINCRBY', K_LIMIT.rate, NUL .. queue, 1)
      until_ms, reason = free_at + (n - 1) * math.ceil(lim.rate_per / lim.rate_limit), 'rate'
    end
  end
  if until_ms then return LIMITS.fmt(until_ms), reason end
  return nil
end

-- Count a claim of a limited queue: the job holds a slot until its lock
-- expires (members already expired are trimmed: they count no longer) and
-- the rate's clock moves to now.
function LIMITS.take(lim, queue, id, expires, now)
  local ak = K_LIMIT.active .. queue
  redis.call('ZREMRANGEBYSCORE', ak, '-inf', LIMITS.fmt(now))
  redis.call('ZADD', ak, expires, id)
  redis.call('HSET', k_job(id), 'lq', '1')
  if lim.rate_limit then
    redis.call('HSET', K_LIMIT.rate, queue, LIMITS.fmt(now))
    redis.call('HDEL', K_LIMIT.rate, NUL .. queue)
  end
end

-- A marked job ('lq') leaves active (ack, release, recovery, fan-out,
-- removal): its slot frees.  The caller clears the row's mark with the lock
-- fields; now is the call's time (nil: unknown).
function LIMITS.leave(id, queue, now)
  if redis.call('ZREM', K_LIMIT.active .. queue, id) == 1 then
    LIMITS.freed[queue] = now or false
  end
end

-- At the end of a call (with_owed): for each queue whose slot freed, when a
-- claim found it full and a slot is still free now (an ack_claim usually
-- takes the slot its ack freed), wake one waiting claimer per process
-- (message NUL .. queue; store/wake.py SLOT_FREED).
function LIMITS.flush()
  if next(LIMITS.freed) == nil then return end
  for queue, now in pairs(LIMITS.freed) do
    if redis.call('SISMEMBER', K_LIMIT.blocked, queue) == 1 then
      local lim = LIMITS.read(queue)
      local free = true
      if lim and lim.concurrency then
        local ak = K_LIMIT.active .. queue
        local held
        if now then
          held = redis.call('ZCOUNT', ak, '(' .. LIMITS.fmt(now), '+inf')
        else
          held = redis.call('ZCARD', ak)
        end
        free = held < lim.concurrency
      end
      if free then redis.call('PUBLISH', K_WAKE, NUL .. queue) end
    end
  end
  LIMITS.freed = {}
end

-- A claim found nothing to take: nobody waits for a slot of queue.
function LIMITS.idle(queue)
  redis.call('SREM', K_LIMIT.blocked, queue)
end
