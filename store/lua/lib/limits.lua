-- Flow control: queue limits checked inside the claim (docs/flow-control.md).
--
-- K_LIMIT.settings field <queue> holds a limited queue's settings, written by
-- set_limits.lua: "<concurrency>:<rate limit>:<rate period ms>:<group
-- concurrency>:<group rate limit>:<group rate period ms>", '' for a kind that
-- is not limited.  A queue without a field costs its claims one HMGET.
--
-- Concurrency is counted by lock expiry: a claim of a queue with a
-- concurrency limit adds the job to K_LIMIT.active .. queue, scored by its
-- lock expiry, and marks the row ('lq'; see LIMITS.take); the heartbeat moves
-- the score, every exit from active removes it.  Only members whose lock has not expired count, so a crashed worker's
-- slot frees when its lock expires, before stall recovery runs.
--
-- The rate is a GCRA without burst tolerance: a claim is admitted once the
-- theoretical arrival time (TAT) is not after now, and moves it to
-- max(TAT, now) + per_ms / limit (kept exactly, see LIMITS.tat), so claims
-- are spread evenly and no window of per_ms ms, wherever it starts, holds
-- more than limit claims.
--
-- One table holds the helpers (the joined library keeps its locals few).
-- This file comes before owed.lua: with_owed, which ends every script that
-- can free a slot, publishes the slot-freed wakes (LIMITS.flush).
local LIMITS = { freed = {} }

function LIMITS.fmt(n) return string.format('%.0f', n) end

-- The settings of queue, or nil when it has none, and whether the queue has
-- job groups (field NUL .. queue, set when its first group entered a turn).
-- One HMGET either way.
function LIMITS.read(queue)
  local v = redis.call('HMGET', K_LIMIT.settings, queue, NUL .. queue)
  local s, groups = v[1], v[2] and true or false
  if not s then return nil, groups end
  local f, i = {}, 0
  for part in string.gmatch(s .. ':', '([^:]*):') do
    i = i + 1
    f[i] = tonumber(part)
  end
  return {
    concurrency = f[1], rate_limit = f[2], rate_per = f[3],
    gconc = f[4], grate_limit = f[5], grate_per = f[6],
  }, groups
end

-- A rate's theoretical arrival time (TAT: when the next claim may come) is
-- kept exactly as "<whole ms>:<remainder>", the remainder in 1/limit ms, so
-- a spacing of per_ms / limit below a millisecond (5000/s: 0.2 ms) is exact
-- and several claims may go in one millisecond.  A value without ':' is a
-- last claim time (ms) written before; its TAT is one spacing later.
-- Returns the TAT's whole ms and remainder, or nil.
function LIMITS.tat(value, limit, per)
  if not value then return nil end
  local w, r = string.match(value, '^(%-?%d+):(%d+)$')
  if w then return tonumber(w), tonumber(r) end
  local last = tonumber(value)
  if not last then return nil end
  return last + (per - per % limit) / limit, per % limit
end

-- The TAT after a claim at now: max(TAT, now) + per / limit, as a value.
function LIMITS.next_tat(value, limit, per, now)
  local w, r = LIMITS.tat(value, limit, per)
  if not w or w < now then w, r = now, 0 end
  w, r = w + (per - per % limit) / limit, r + per % limit
  if r >= limit then w, r = w + 1, r - limit end
  return LIMITS.fmt(w) .. ':' .. LIMITS.fmt(r)
end

-- The first ms at which the rate admits a claim (<= now: admits now): the
-- TAT's whole ms.  Claims are admitted while it is not after now.
function LIMITS.rate_free_at(lim, queue, now)
  -- The value read is kept for LIMITS.take (lim is read afresh by every claim).
  lim.tat = redis.call('HGET', K_LIMIT.rate, queue)
  local w = LIMITS.tat(lim.tat, lim.rate_limit, lim.rate_per)
  if not w or w <= now then return now end
  return w
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

-- The row mark ('lq') of a claim of a limited queue that holds slots (nil:
-- none): '1' a slot of the queue (it has a concurrency limit) and, under a
-- group concurrency limit, of its group (group: nil for an ungrouped job);
-- 'g' of its group only.  The claim writes it with the lock fields.
function LIMITS.mark(lim, group)
  if lim.concurrency then return '1' end
  if group and lim.gconc then return 'g' end
  return nil
end

-- Count a claim of a limited queue: under a concurrency limit the job holds
-- a slot until its lock expires, in the queue and, under a group concurrency
-- limit, in its group.  (A member whose lock expired counts no longer and
-- leaves with its job: at its ack, or when stall recovery takes it back.)
-- The rates' TATs move on (read once: the check before the claim kept them).
-- emptied: the claim took its group's last waiting job.
function LIMITS.take(lim, queue, id, expires, now, group, emptied)
  if lim.concurrency then redis.call('ZADD', K_LIMIT.active .. queue, expires, id) end
  if group and lim.gconc then redis.call('ZADD', K_LIMIT.gactive .. queue .. NUL .. group, expires, id) end
  if lim.rate_limit then
    local rk = K_LIMIT.rate
    local tat = lim.tat
    if tat == nil then tat = redis.call('HGET', rk, queue) end
    redis.call('HSET', rk, queue, LIMITS.next_tat(tat, lim.rate_limit, lim.rate_per, now))
    redis.call('HDEL', rk, NUL .. queue)
  end
  if group and lim.grate_limit then
    local tk = K_LIMIT.gtat .. queue
    local tat = lim.gtat and lim.gtat[group]
    if tat == nil then tat = redis.call('HGET', tk, group) end
    local next_tat = LIMITS.next_tat(tat, lim.grate_limit, lim.grate_per, now)
    redis.call('HSET', tk, group, next_tat)
    if emptied then LIMITS.cool(queue, group, next_tat, now) end
  end
end

-- A marked job ('lq') leaves active (ack, release, recovery, fan-out,
-- removal): its slot frees, in its queue and in its group (nil: none).  The
-- caller clears the row's mark with the lock fields; now is the call's time
-- (nil: unknown).  A group held back by its limits takes its turn again (the
-- next claim looks at it again).
function LIMITS.leave(id, queue, now, group)
  if redis.call('ZREM', K_LIMIT.active .. queue, id) == 1 then
    LIMITS.freed[queue] = now or false
  end
  -- A group held back by its limits that takes its turn again wakes a claimer.
  if group and redis.call('ZREM', K_LIMIT.gactive .. queue .. NUL .. group, id) == 1
      and LIMITS.unhold(queue, group) then
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

-- Job groups.  A job enqueued with a group waits in its group's set
-- (K_LIMIT.gwait, members and scores as in the per-name waiting sets:
-- priority, then FIFO) and in the per-(queue, name) set of grouped waiting
-- jobs (K_LIMIT.gwaiting, read by listings and mqcheck), not in the per-name
-- waiting set.  The groups of a queue that have waiting jobs take turns
-- (K_LIMIT.turns, scored by turn): a claim looks at the group whose turn it
-- is, and a group that gave a job goes to the back.  A group whose limits
-- admit no claim now leaves the turns for K_LIMIT.held, scored by when its
-- limits next admit one (its first lock expiry, its next rate token); it
-- comes back then, or at once when one of its claims ends.  So a claim costs
-- a few O(log groups) commands whatever the number of groups.

-- Groups one claim looks at (held back, emptied or not the claimer's names)
-- before it hands back 'again'; held groups one claim brings back.
LIMITS.GROUP_SCAN, LIMITS.GROUP_RELEASE = 20, 100


-- Whether lim limits groups.
function LIMITS.grouped(lim) return lim ~= nil and (lim.gconc ~= nil or lim.grate_limit ~= nil) end

-- The turn after every group's: one past the highest.
function LIMITS.back(queue)
  local last = redis.call('ZRANGE', K_LIMIT.turns .. queue, -1, -1, 'WITHSCORES')
  return (tonumber(last[2]) or 0) + 1
end

-- A grouped job starts waiting (score and member as in the waiting sets).  A
-- group that had none waiting takes the last turn, unless it is held.
function LIMITS.group_add(queue, name, group, score, member)
  local gk = K_LIMIT.gwait .. queue .. NUL .. group
  redis.call('ZADD', gk, score, member)
  redis.call('ZADD', K_LIMIT.gwaiting .. queue .. NUL .. name, score, member)
  local size = redis.call('ZCARD', gk)
  redis.call('ZADD', K_LIMIT.gsize .. queue, size, group)
  if size == 1 and not redis.call('ZSCORE', K_LIMIT.held .. queue, group) then
    redis.call('ZADD', K_LIMIT.turns .. queue, LIMITS.back(queue), group)
    redis.call('HSETNX', K_LIMIT.settings, NUL .. queue, '1')
  end
end

-- A grouped job stops waiting (claimed, cancelled, removed, ...).  name is
-- nil for a dangling member.  A group left without waiting jobs leaves the
-- turns; when taken is true the group had its turn and goes to the back.
function LIMITS.group_rem(queue, name, group, member, taken)
  local gk = K_LIMIT.gwait .. queue .. NUL .. group
  redis.call('ZREM', gk, member)
  if name then redis.call('ZREM', K_LIMIT.gwaiting .. queue .. NUL .. name, member) end
  local left = redis.call('ZCARD', gk)
  if left == 0 then
    redis.call('ZREM', K_LIMIT.turns .. queue, group)
    redis.call('ZREM', K_LIMIT.gsize .. queue, group)
    if not taken then
      -- Emptied by a cancel, a removal, ...: its rate's TAT is kept until it
      -- has passed (see LIMITS.cool).
      local w = LIMITS.tat(redis.call('HGET', K_LIMIT.gtat .. queue, group), 1, 1)
      if w then redis.call('ZADD', K_LIMIT.gcool .. queue, w, group) end
    end
  else
    redis.call('ZADD', K_LIMIT.gsize .. queue, left, group)
    if taken then redis.call('ZADD', K_LIMIT.turns .. queue, 'XX', LIMITS.back(queue), group) end
  end
  return left
end

-- mqcheck: whether a waiting grouped job is where it should be (in its
-- group's set and its (queue, name) set, its group in turn or held).  With
-- fix, a group in neither takes the last turn.
function LIMITS.group_row(queue, name, group, member, fix)
  local placed = redis.call('ZSCORE', K_LIMIT.turns .. queue, group)
    or redis.call('ZSCORE', K_LIMIT.held .. queue, group)
  if fix and not placed then
    redis.call('ZADD', K_LIMIT.turns .. queue, LIMITS.back(queue), group)
    redis.call('HSET', K_LIMIT.settings, NUL .. queue, '1')
  end
  return placed and redis.call('ZSCORE', K_LIMIT.gwait .. queue .. NUL .. group, member)
    and redis.call('ZSCORE', K_LIMIT.gwaiting .. queue .. NUL .. name, member) and true or false
end

-- Each group's rate TAT (K_LIMIT.gtat) is kept while the group has waiting
-- jobs.  A group left without any (its last claimed, cancelled, ...) cools
-- down in K_LIMIT.gcool, scored by its TAT, so a refilled group is still
-- spaced by its rate; each claim that empties a group forgets the TATs of a
-- page of groups whose time has come (unless a later claim moved them on),
-- so the TATs cost nothing per claim and stay bounded.
function LIMITS.cool(queue, group, tat, now)
  local ck, tk = K_LIMIT.gcool .. queue, K_LIMIT.gtat .. queue
  redis.call('ZADD', ck, LIMITS.tat(tat, 1, 1), group)
  local due = redis.call('ZRANGEBYSCORE', ck, '-inf', LIMITS.fmt(now), 'LIMIT', 0, LIMITS.GROUP_RELEASE)
  for _, g in ipairs(due) do
    redis.call('ZREM', ck, g)
    local w = LIMITS.tat(redis.call('HGET', tk, g), 1, 1)
    if not w or w <= now then redis.call('HDEL', tk, g) end
  end
end

-- A held group takes a turn again (if it still has waiting jobs).
-- True when it did.
function LIMITS.unhold(queue, group)
  if redis.call('ZREM', K_LIMIT.held .. queue, group) == 1
      and redis.call('EXISTS', K_LIMIT.gwait .. queue .. NUL .. group) == 1 then
    redis.call('ZADD', K_LIMIT.turns .. queue, 'NX', LIMITS.back(queue), group)
    return true
  end
  return false
end

-- nil when group's limits admit a claim now, else the ms when they next may.
function LIMITS.group_until(lim, queue, group, now)
  local until_ms
  if lim.gconc then
    local ak = K_LIMIT.gactive .. queue .. NUL .. group
    local live = '(' .. LIMITS.fmt(now)
    if redis.call('ZCOUNT', ak, live, '+inf') >= lim.gconc then
      local first = redis.call('ZRANGEBYSCORE', ak, live, '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
      until_ms = tonumber(first[2])
    end
  end
  if lim.grate_limit then
    local tat = redis.call('HGET', K_LIMIT.gtat .. queue, group)
    lim.gtat = lim.gtat or {}
    lim.gtat[group] = tat  -- false when none: LIMITS.take reads it from here
    local w = LIMITS.tat(tat, lim.grate_limit, lim.grate_per)
    if w and w > now and (not until_ms or w > until_ms) then until_ms = w end
  end
  return until_ms
end

-- The grouped job a claim of queue may take: the head of the first group in
-- turn whose limits admit a claim and whose head has a handled name (a head
-- whose row is gone is returned too: the claim drops it).  Held groups that
-- are due come back first (all of them, a page at a time, when the queue no
-- longer limits groups).  Returns a candidate {member, score, group} or
-- nil, and 'again' when the scan moved groups out of the turns without
-- finding one (the caller claims again).
function LIMITS.pick(queue, handled, lim, now)
  local limited = LIMITS.grouped(lim)
  local hk, tk = K_LIMIT.held .. queue, K_LIMIT.turns .. queue
  local due
  if limited then
    due = redis.call('ZRANGEBYSCORE', hk, '-inf', LIMITS.fmt(now), 'LIMIT', 0, LIMITS.GROUP_RELEASE)
  else
    due = redis.call('ZRANGE', hk, 0, LIMITS.GROUP_RELEASE - 1)
  end
  for _, g in ipairs(due) do LIMITS.unhold(queue, g) end
  local at, moved = 0, false
  for _ = 1, LIMITS.GROUP_SCAN do
    local g = redis.call('ZRANGE', tk, at, at)[1]
    if not g then return nil end
    local gk = K_LIMIT.gwait .. queue .. NUL .. g
    local top = redis.call('ZRANGE', gk, 0, 0, 'WITHSCORES')
    local until_ms = #top > 0 and limited and LIMITS.group_until(lim, queue, g, now)
    if #top == 0 then
      redis.call('ZREM', tk, g)
      redis.call('ZREM', K_LIMIT.gsize .. queue, g)
      moved = true
    elseif until_ms then
      redis.call('ZREM', tk, g)
      redis.call('ZADD', hk, until_ms, g)
      moved = true
    else
      local name = redis.call('HGET', k_job(string.sub(top[1], WAITING_SEQ_WIDTH + 1)), 'name')
      if not name or handled[name] then
        return { member = top[1], score = tonumber(top[2]), group = g }
      end
      at = at + 1
    end
  end
  if moved then return nil, 'again' end
  return nil
end

-- When the queue's held groups next may give a job (nil: none held).
function LIMITS.held_until(queue)
  local first = redis.call('ZRANGE', K_LIMIT.held .. queue, 0, 0, 'WITHSCORES')
  return first[2]
end

