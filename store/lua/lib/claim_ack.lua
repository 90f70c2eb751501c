-- claim and ack, shared by claim.lua, ack.lua, ack_claim.lua and
-- ack_claim_many.lua (a worker's "finish this job and fetch the next" in one
-- round trip), and the arguments those scripts read.

local PROMOTE_LIMIT = 200
local NEXT_RUN_SCAN = 200
-- Dangling waiting members one claim skips (and removes) before it hands
-- the rest back with 'again'.
local ORPHAN_SKIP = 100

-- Promote up to limit due delayed jobs of a queue, oldest run_at first.
-- Dangling members (their hash gone) are dropped with their counter.  Returns
-- the number of members handled and whether more due members remain.
local function promote_due(queue, now, limit)
  local dk = k_delayed(queue)
  local due = redis.call('ZRANGEBYSCORE', dk, '-inf', now, 'LIMIT', 0, limit)
  for _, id in ipairs(due) do
    redis.call('ZREM', dk, id)
    local f = redis.call('HMGET', k_job(id), 'name', 'priority', 'seq', 'state', 'queue', 'group', 'am')
    if is_row(f[4], f[5], f[1], f[3]) then
      redis.call('HSET', k_job(id), 'state', 'waiting')
      add_waiting(queue, f[1], f[2] or '0', f[3], id, f[6] or nil)
      counts_add(queue, 'delayed', -1)
      counts_add(queue, 'waiting', 1)
      EVENTS.emit('waiting', id, f[1], queue, tonumber(f[7]) or 0, now, nil)
    else
      uncount(queue, 'delayed')
    end
  end
  local more = #due >= limit and #redis.call('ZRANGEBYSCORE', dk, '-inf', now, 'LIMIT', 0, 1) > 0
  return #due, more
end

-- Claim: promote every due delayed job of the queue (for every name and even
-- while paused), then take the best waiting job whose name is in names.
-- Returns {'claimed', id, pairs[, 'limited']}, {'empty', next_run_at or ''},
-- {'throttled', until ms, 'concurrency' | 'rate'} (a queue limit holds back
-- the jobs that wait; nothing was taken) or {'again'}.
-- Work per call is bounded: at most PROMOTE_LIMIT promotions, NEXT_RUN_SCAN
-- delayed members examined and ORPHAN_SKIP dangling waiting members removed.
--
-- batch: {} for a single claim, else the state of a batch of claims of one
-- queue in one call (ack_claim_many).  Nothing a claim does changes what the
-- first claim of the call read -- due promotions (the time is the call's),
-- the queue's pause and its limits -- so later claims reuse it.  want: the
-- claims still to make in the call; with one job name, no groups and no
-- limits, the call pops that many members at once (ZPOPMIN) and takes them in
-- order.  defer: the claims' active-set entries are collected in batch.active
-- for the caller to add in one ZADD (claim_batch_end) -- nothing in the call
-- reads the active set after its claims.
-- When more jobs are due than one call promotes, nothing is picked (a job
-- still delayed may outrank every waiting one): the call owes 'promote' work,
-- which the caller finishes in bounded promote_due calls, then claims again.
-- 'again' also follows a page of dangling members.
local function claim_next(now, token, lock_ms, queue, names, batch)
  local dk = k_delayed(queue)
  if not batch.ready then
    local _, more = promote_due(queue, now, PROMOTE_LIMIT)
    if more then
      owe('promote', queue)
      return { 'again', '' }
    end
  end

  -- The earliest run_at among delayed jobs with a handled name.  If the
  -- bounded scan finds none but more members remain, the last examined score
  -- is a safe early wake-up (the caller simply claims again then).
  local handled = batch.handled
  if not handled then
    handled = {}
    for _, name in ipairs(names) do handled[name] = true end
  end
  local function next_run_at()
    local page = redis.call('ZRANGE', dk, 0, NEXT_RUN_SCAN - 1, 'WITHSCORES')
    for i = 1, #page, 2 do
      local name = redis.call('HGET', k_job(page[i]), 'name')
      if name and handled[name] then return page[i + 1] end
      if not name and redis.call('ZREM', dk, page[i]) == 1 then uncount(queue, 'delayed') end
    end
    if #page >= NEXT_RUN_SCAN * 2 then return page[#page] end
    return ''
  end

  local lim, groups
  if batch.ready then
    lim, groups = batch.lim, batch.groups
  else
    if #names == 0 or redis.call('SISMEMBER', K_PAUSED, queue) == 1 then
      return { 'empty', next_run_at() }
    end
    -- Queue limits (lib/limits.lua): one HMGET when the queue has none, which
    -- also tells whether it has job groups.  They are checked once a job is
    -- there to take, before anything is taken, so a limited job is never
    -- claimed and handed back.
    lim, groups = LIMITS.read(queue)
    batch.ready, batch.lim, batch.groups, batch.handled = true, lim, groups, handled
    -- One name, no groups, no limits: pop the members the batch wants.
    if #names == 1 and not groups and not lim and (batch.want or 1) > 1 then
      batch.pop, batch.at = {}, 1
    end
  end
  local unchecked = lim ~= nil

  for _ = 1, ORPHAN_SKIP do
    -- Seqs are unique and zero-padded, so comparing members compares seqs.
    local best_key, best_member, best_score, group
    local pop = batch.pop
    if pop then
      -- Popped members are out of the set already, taken or dangling alike.
      if batch.at > #pop then
        pop = redis.call('ZPOPMIN', k_waiting(queue, names[1]), math.max(1, batch.want or 1))
        batch.pop, batch.at = pop, 1
      end
      if batch.at <= #pop then
        best_member, best_score = pop[batch.at], tonumber(pop[batch.at + 1])
        batch.at = batch.at + 2
      end
    end
    for _, name in ipairs(pop and {} or names) do
      local wk = k_waiting(queue, name)
      local top = redis.call('ZRANGE', wk, 0, 0, 'WITHSCORES')
      if #top > 0 then
        local score = tonumber(top[2])
        if best_member == nil or score < best_score or (score == best_score and top[1] < best_member) then
          best_key, best_member, best_score = wk, top[1], score
        end
      end
    end
    -- The head of the group whose turn it is competes with the ungrouped
    -- jobs by priority, then arrival.
    if groups then
      local c, again = LIMITS.pick(queue, handled, lim, now)
      if c and (best_member == nil or c.score < best_score or (c.score == best_score and c.member < best_member)) then
        -- (best_key stays: a grouped job leaves its sets through LIMITS.group_rem.)
        best_member, best_score, group = c.member, c.score, c.group
      elseif again and not best_member then
        return { 'again', '' }
      end
    end
    if not best_member then
      local held = groups and LIMITS.grouped(lim) and LIMITS.held_until(queue)
      if held then
        -- Every group with waiting jobs is held back by its limits.
        redis.call('SADD', K_LIMIT.blocked, queue)
        return { 'throttled', held, 'group' }
      end
      if lim then LIMITS.idle(queue) end
      return { 'empty', next_run_at() }
    end
    if unchecked then
      local until_ms, reason = LIMITS.blocked(lim, queue, now)
      if until_ms then return { 'throttled', until_ms, reason } end
      unchecked = false
    end

    local id = string.sub(best_member, WAITING_SEQ_WIDTH + 1)
    local jk = k_job(id)
    local f = redis.call('HMGET', jk, 'state', 'queue', 'name', 'seq', 'am')
    local left
    if group then
      left = LIMITS.group_rem(queue, f[3] or nil, group, best_member, true)
    elseif not pop then
      redis.call('ZREM', best_key, best_member)
    end
    local row = is_row(f[1], f[2], f[3], f[4])
    if row and f[1] == 'waiting' and waiting_member(f[4], id) == best_member then
      local expires = now + lock_ms
      local mark = lim and LIMITS.mark(lim, group)
      if mark then
        redis.call('HSET', jk, 'state', 'active', 'lock_token', token,
          'lock_expires_at', fmt(expires), 'pa', fmt(now), 'lq', mark)
      else
        redis.call('HSET', jk, 'state', 'active', 'lock_token', token,
          'lock_expires_at', fmt(expires), 'pa', fmt(now))
      end
      if batch.defer then
        local active = batch.active
        -- As text: a number argument is printed again (%.17g) for every
        -- member, while fmt prints a time once and reuses it.
        active[#active + 1] = fmt(expires)
        active[#active + 1] = id
      else
        redis.call('ZADD', K_ACTIVE, expires, id)
      end
      counts_add(queue, 'waiting', -1)
      counts_add(queue, 'active', 1)
      EVENTS.emit('active', id, f[3], queue, (tonumber(f[5]) or 0) + 1, now, nil)
      if lim then
        LIMITS.take(lim, queue, id, expires, now, group, left == 0)
        -- The fourth entry tells a batch claim to stop: each further job of a
        -- limited queue is checked (and taken) by a claim of its own.
        return { 'claimed', id, redis.call('HGETALL', jk), 'limited' }
      end
      return { 'claimed', id, redis.call('HGETALL', jk) }
    end
    -- A dangling member: its hash is gone (take back its counter), or it is
    -- a stale member of a row counted elsewhere (another state or seq).
    if not row then uncount(queue, 'waiting') end
  end
  return { 'again', '' }
end

-- Ack of a job whose row is gone: a dangling active member is dropped.
local function ack_missing(id)
  drop_active_orphan(id)
  return { 'notfound' }
end

-- The run's entry in the per-job-name run aggregates (lib/tally.lua), at ack
-- time (the dashboard's metrics page reads them).
local function record_run(j, outcome, now)
  local started = tonumber(j.processed_at or '')
  if not started then return end
  TALLY.run(j.name, now, outcome == 'fail' or outcome == 'retry', math.floor(math.max(0, now - started)))
end

-- Ack: record the outcome of a held run.  outcome is 'complete' | 'fail' |
-- 'cancelled' | 'retry'; exit_json is raw JSON or nil.  Every outcome consumes
-- an attempt.  Complete and Fail store the exit and win over a pending
-- cancel; Retry on a cancel-requested job ends it cancelled.
-- Returns {'ok', queue}, {'notfound'} or {'locklost'}.
local function ack_job(now, id, token, outcome, exit_json, retry_delay)
  local j = snapshot(id)
  if not j then return ack_missing(id) end
  if j.state ~= 'active' or j.lock_token ~= token then return { 'locklost' } end

  local jk = j.jk
  record_run(j, outcome, now)
  -- The attempt counter: written with the terminal fields when the run ends
  -- the job, else counted up at once.
  if outcome == 'complete' or outcome == 'fail' then
    j.am = j.am + 1
  else
    j.am = redis.call('HINCRBY', jk, 'am', 1)
  end
  if outcome == 'complete' then
    finish(id, j, 'completed', { store_exit = true, exit_json = exit_json, ledger_exit = exit_json, am = j.am }, now)
  elseif outcome == 'fail' then
    record_error(id, j, exit_json, nil, now)
    finish(id, j, 'failed', { store_exit = true, exit_json = exit_json, ledger_exit = exit_json, am = j.am }, now)
  elseif outcome == 'cancelled' or j.cancel_requested then
    finish_cancelled(id, j, now)
  else
    -- Retry: back of the line with a fresh seq, after the delay.
    local delay = math.max(0, retry_delay)
    append_attempt(id, 'retried', j.processed_at, now, exit_json)
    local seq = redis.call('INCR', K_SEQ)
    if delay > 0 then
      redis.call('ZREM', K_ACTIVE, id)
      if j.limited then LIMITS.leave(id, j.queue, now, j.group) end
      redis.call('HSET', jk, 'state', 'delayed', 'seq', fmt(seq), 'run_at', fmt(now + delay))
      redis.call('HDEL', jk, 'lock_token', 'lock_expires_at', 'lq')
      redis.call('ZADD', k_delayed(j.queue), now + delay, id)
      counts_add(j.queue, 'active', -1)
      counts_add(j.queue, 'delayed', 1)
      EVENTS.emit('retrying', id, j.name, j.queue, j.am, now, '{"run_at":' .. fmt(now + delay) .. '}')
    else
      make_waiting(id, j, seq, now, now, 'retrying')
    end
    wake(j.queue)
  end
  return { 'ok', j.queue }
end

-- The arguments of the claim scripts.  claim, ack_claim and ack_claim_many
-- read one layout (RedisJobStore._claim_argv builds it):
--   [1] now   [2] lock duration ms   [3] queue
--   [4] n, then n acks of ACK_ARGS strings each (see read_ack)
--   then k, then k lock tokens (one per claim), then the handled job names
-- A plain claim sends n = 0 and k = 1; ack_claim n = 1 and k = 1.
local ACK_ARGS = 5

-- argv[from..to] as a list.
local function argv_list(argv, from, to)
  local out = {}
  for i = from, to do out[#out + 1] = argv[i] end
  return out
end

-- One ack's strings from argv[at]: id, token, outcome, exit JSON ('' = none),
-- retry delay ms.  ack.lua reads the same fields after its now.
local function read_ack(argv, at)
  local exit_json = argv[at + 3]
  if exit_json == '' then exit_json = nil end
  return {
    id = argv[at], token = argv[at + 1], outcome = argv[at + 2],
    exit_json = exit_json, retry_delay = tonumber(argv[at + 4]) or 0,
  }
end

-- ack_job for an ack read_ack returned.
local function run_ack(now, a)
  return ack_job(now, a.id, a.token, a.outcome, a.exit_json, a.retry_delay)
end

-- The claim layout above, read whole (parsing writes nothing, so reading the
-- acks up front leaves their order against the claims as it was).
local function read_claim_args(argv)
  local n = tonumber(argv[4])
  local acks = {}
  for i = 0, n - 1 do acks[#acks + 1] = read_ack(argv, 5 + i * ACK_ARGS) end
  local at = 5 + n * ACK_ARGS
  local k = tonumber(argv[at])
  return {
    now = tonumber(argv[1]), lock_ms = tonumber(argv[2]), queue = argv[3], acks = acks,
    tokens = argv_list(argv, at + 1, at + k), names = argv_list(argv, at + k + 1, #argv),
  }
end

-- The end of a batch of claims (see claim_next): add the active-set entries
-- it collected, and put back popped members no claim took (none when the
-- batch asked for as many as it claims; kept as a guard).
local function claim_batch_end(batch, queue, names)
  local active = batch.active
  if active and #active > 0 then call_runs('ZADD', K_ACTIVE, active, 1, #active, 2) end
  local pop = batch.pop
  if pop and batch.at <= #pop then
    local back = {}
    for i = batch.at, #pop, 2 do
      back[#back + 1] = pop[i + 1]
      back[#back + 1] = pop[i]
    end
    call_runs('ZADD', k_waiting(queue, names[1]), back, 1, #back, 2)
  end
end
