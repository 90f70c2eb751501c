-- Deleting rows, and the per-job keep policy applied at terminal transitions.

-- A settled flow parent that still owes cancel cascades is exempt from
-- automatic retention.  The flow scripts keep the owed count per parent.
local function owes_cascades(id)
  local owed = redis.call('HGET', K_FLOW_OWES, id)
  return owed and tonumber(owed) > 0
end

-- Delete a remnant hash (its identifying fields lost, so its per-queue and
-- per-name set members cannot be named): drop it from the store-wide sets
-- that may list it; mqcheck removes the rest as dangling members.
local function delete_remnant(id)
  cz_rem(K_ALL, redis.call('HGET', k_job(id), 'enqueued_at') or nil, id)
  redis.call('ZREM', K_ACTIVE, id)
  redis.call('ZREM', K_KEEPAGE, id)
  for _, s in ipairs({ 'completed', 'failed', 'cancelled' }) do redis.call('ZREM', k_finished(s), id) end
  redis.call('DEL', k_job(id), k_attempts(id), K_LIMIT.logs .. id)
end

-- Remove a job and everything that points at it.  Dedupe entries and outbox
-- entries are deliberately left alone (see the store contract, remove).
local function delete_job(id)
  local jk = k_job(id)
  local f = redis.call('HMGET', jk, 'name', 'queue', 'state', 'seq', 'error_group', 'enqueued_at', 'lq', 'group')
  local name, queue, state, seq = f[1], f[2], f[3], f[4]
  if not is_row(state, queue, name, seq) then
    if redis.call('EXISTS', jk) == 0 then return false end
    delete_remnant(id)
    return true
  end
  -- A ZREM comes first on purpose: on a full server (noeviction) Redis refuses a
  -- memory-growing command only as a script's first write, so deleting still works
  -- (a chunk merge after it moves members, which the first write lets through).
  local enqueued = f[6] or nil
  cz_rem(K_ALL, enqueued, id)
  forget_error(id, f[5] or nil)
  counts_add(queue, state, -1)
  cz_rem(k_byname(name), enqueued, id)
  cz_rem(k_byqueue(queue), enqueued, id)
  if state == 'waiting' then
    rem_waiting(queue, name, seq, id, f[8])
  elseif state == 'delayed' then
    redis.call('ZREM', k_delayed(queue), id)
  elseif state == 'active' then
    redis.call('ZREM', K_ACTIVE, id)
    if f[7] then LIMITS.leave(id, queue, nil, f[8] or nil) end
  elseif state == 'waiting-children' then
    redis.call('ZREM', k_parked(queue), id)
  elseif is_terminal(state) then
    redis.call('ZREM', k_finished(state), id)
    redis.call('ZREM', k_terminal(name, state), id)
    redis.call('ZREM', K_KEEPAGE, id)
    redis.call('ZREM', K_LIMIT.settled, id)
  end
  if redis.call('EXISTS', k_flowchildren(id)) == 1 then delete_flow_rows(id) end
  redis.call('HDEL', K_FLOW_OWES, id)
  redis.call('DEL', jk, k_attempts(id), K_LIMIT.logs .. id)
  return true
end

-- Delete a row of a (name, state) group; a dangling member (its hash gone) is
-- dropped from the group and the finished set, with its counter.
local function prune_row(tk, state, id)
  if delete_job(id) then return end
  -- Its queue is looked up while the group still lists it.
  local queue = redis.call('ZSCORE', k_finished(state), id) and orphan_queue(id, state)
  redis.call('ZREM', tk, id)
  if redis.call('ZREM', k_finished(state), id) == 1 and queue then uncount(queue, state) end
  redis.call('ZREM', K_KEEPAGE, id)
end

-- The keep rule for one state: the policy of the job that just finished.  The
-- flat legacy shape {count, age_ms} means the same rule for every state.
local function keep_rule(keep_json, state)
  if not keep_json then return nil end
  local ok, keep = pcall(cjson.decode, keep_json)
  if not ok or type(keep) ~= 'table' then return nil end
  local rule = keep[state]
  if type(rule) == 'table' then return rule end
  if keep.completed == nil and keep.failed == nil and keep.cancelled == nil
      and (keep.count ~= nil or keep.age_ms ~= nil) then
    return keep
  end
  return nil
end

-- How many rows one script may prune for one group.  When a group needs more
-- (a keep policy newly applied to a large history), the script reports the
-- owed work in its reply (see with_keep_owed) and the caller finishes it with
-- further bounded prune_keep calls before the operation returns.
local KEEP_BUDGET = 500
local TIE_LIMIT = 1000

-- One bounded pass of the keep rule over a (name, state) group.  Returns true
-- when the budget ran out (the group may still be over its rule).
local function apply_keep_once(name, state, rule, now)
  local tk = k_terminal(name, state)
  local budget = KEEP_BUDGET
  local age = tonumber(rule.age_ms)
  if age then
    local old = redis.call('ZRANGEBYSCORE', tk, '-inf', now - age, 'LIMIT', 0, budget)
    for _, id in ipairs(old) do
      if not owes_cascades(id) then
        prune_row(tk, state, id)
        budget = budget - 1
      end
    end
    if budget <= 0 then return true end
  end
  local count = tonumber(rule.count)
  if count == nil then return false end
  count = math.floor(math.max(0, count))
  if redis.call('ZCARD', tk) <= count then return false end
  -- Order is finished_at desc, then seq desc.  Rows scored above the row at
  -- rank `count` are kept, rows below it are pruned, and rows tied with it are
  -- ordered by seq (a zset score cannot carry that tie-break).
  local at = redis.call('ZREVRANGE', tk, count, count, 'WITHSCORES')
  if #at == 0 then return false end
  local boundary = at[2]
  local above = redis.call('ZCOUNT', tk, '(' .. boundary, '+inf')
  local ties = redis.call('ZRANGEBYSCORE', tk, boundary, boundary, 'LIMIT', 0, TIE_LIMIT)
  local ranked = {}
  for i, id in ipairs(ties) do
    ranked[i] = { id = id, seq = tonumber(redis.call('HGET', k_job(id), 'seq')) or 0 }
  end
  table.sort(ranked, function(a, b) return a.seq > b.seq end)
  local slots = count - above
  for i, row in ipairs(ranked) do
    if i > slots and not owes_cascades(row.id) then
      if budget <= 0 then return true end
      prune_row(tk, state, row.id)
      budget = budget - 1
    end
  end
  if budget <= 0 then return true end
  local below = redis.call('ZREVRANGEBYSCORE', tk, '(' .. boundary, '-inf', 'LIMIT', 0, budget)
  for _, id in ipairs(below) do
    if not owes_cascades(id) then prune_row(tk, state, id) end
  end
  return #below >= budget
end

-- Apply keep to a group after a job of it finished, recording owed work.
local function apply_keep(name, state, rule, now, keep_json)
  if apply_keep_once(name, state, rule, now) then owe('keep', name, state, keep_json) end
end

-- Set writes a batch of acks holds (ack_claim_many sets HELD.on for its
-- acks): each finished job leaves the active set and joins its two finished
-- sets (ZREM, ZADD, ZADD), and the batch writes each set once after its last
-- ack (flush_held) instead of three commands per job.  Nothing an ack reads
-- in between is one of those sets, except a keep rule's prune, which writes
-- what is held first (retain_terminal); the batch's claims run after the
-- flush.  A Function library keeps HELD between calls: begin_call empties it
-- after a call that failed half-way.  (One table: the joined library is near
-- Lua's 200 locals.)
local HELD = { on = false, zadd = {}, order = {}, zrem = {} }

local function flush_held()
  if #HELD.zrem > 0 then call_runs('ZREM', K_ACTIVE, HELD.zrem, 1, #HELD.zrem, 1) end
  for _, key in ipairs(HELD.order) do
    local z = HELD.zadd[key]
    call_runs('ZADD', key, z, 1, #z, 2)
  end
  HELD.zadd, HELD.order, HELD.zrem = {}, {}, {}
end

-- Bookkeeping for a row that just became terminal: the finished/terminal
-- indexes, its own age deadline (for the timer sweep), then the group's keep.
-- apply_prune=false reproduces the contract's stall-exhaustion quirk.
local function retain_terminal(id, name, state, keep_json, now, apply_prune)
  local rule = keep_rule(keep_json, state)
  if HELD.on then
    -- In a batch of acks: held, unless a keep rule reads the sets now (what
    -- the batch holds is written first).  The score as text (fmt, printed
    -- once for the call's time), not a number printed again for each member.
    if not rule then
      local score = fmt(now)
      push_keyed(HELD.zadd, HELD.order, k_finished(state), score, id)
      push_keyed(HELD.zadd, HELD.order, k_terminal(name, state), score, id)
      return
    end
    flush_held()
  end
  redis.call('ZADD', k_finished(state), now, id)
  redis.call('ZADD', k_terminal(name, state), now, id)
  if not rule then return end
  local age = tonumber(rule.age_ms)
  if age then redis.call('ZADD', K_KEEPAGE, now + age, id) end
  if apply_prune then apply_keep(name, state, rule, now, keep_json) end
end
