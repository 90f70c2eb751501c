-- State transitions shared by several scripts.

-- The fields every transition needs, read in one call.  nil when the row is
-- gone or is a remnant without its identifying fields (see is_row).
-- has_parent: whether the job carries a parent envelope (finish then appends
-- its report to the outbox; without one it need not look); has_flow: whether it
-- fanned out (a manifest's counters exist); jk: the job's key.
local function snapshot(id)
  local jk = k_job(id)
  local f = redis.call('HMGET', jk, 'state', 'queue', 'name', 'seq', 'priority',
    'pa', 'cancel_requested', 'keep', 'dedupe_key', 'lock_token', 'lq', 'group', 'am', 'parent', 'flow_pending')
  if not is_row(f[1], f[2], f[3], f[4]) then return nil end
  return {
    state = f[1], queue = f[2], name = f[3], seq = f[4], priority = f[5] or '0',
    processed_at = f[6] or nil, cancel_requested = f[7] == '1', keep = get_long(jk, 'keep', f[8]) or nil,
    dedupe_key = get_long(jk, 'dedupe_key', f[9]) or nil, lock_token = f[10] or nil,
    limited = f[11] and true or false, group = f[12] or nil, am = tonumber(f[13]) or 0,
    has_parent = f[14] and true or false, has_flow = f[15] and true or false, jk = jk,
  }
end

-- Take a job out of the structure that holds it in its current state.
local function unlink_from_state(id, j, now)
  if j.state == 'waiting' then
    rem_waiting(j.queue, j.name, j.seq, id, j.group)
  elseif j.state == 'delayed' then
    redis.call('ZREM', k_delayed(j.queue), id)
  elseif j.state == 'active' then
    if HELD.on then
      HELD.zrem[#HELD.zrem + 1] = id -- (lib/retention.lua)
    else
      redis.call('ZREM', K_ACTIVE, id)
    end
    if j.limited then LIMITS.leave(id, j.queue, now, j.group) end
  else
    unpark(id, j)
  end
end

-- Move a job into a terminal state with all the bookkeeping of the contract:
-- finished_at, cleared lock and cancel flag, counters, ledger, outbox, dedupe
-- release, retention.  exit_json (raw JSON or nil) is stored on the record
-- when store_exit is true; ledger_exit goes into the ledger entry; opts.am,
-- when set, is written as the attempts made (an ack's count, in the same
-- HSET).
local function finish(id, j, to_state, opts, now)
  local jk = j.jk or k_job(id)
  unlink_from_state(id, j, now)
  -- The run's ledger entry is folded into the hash when the hash says it all
  -- (see fold_attempt): the common case, a job that ends on its first run,
  -- then has no ledger key at all.
  local label = opts.ledger or to_state
  local stored_exit = opts.store_exit and opts.exit_json or nil
  local folded = label == to_state and opts.ledger_exit == stored_exit
  local h = { 'state', to_state, 'fa', fmt(now) }
  if folded then h[5], h[6] = 'lf', '1' end
  if opts.am then h[#h + 1], h[#h + 2] = 'am', fmt(opts.am) end
  -- A short exit of a job that was running goes in the same HSET: a running
  -- job has no exit (retry clears it), so no pieces of an older one to drop.
  if stored_exit and j.state == 'active' and #stored_exit < PIECE_MIN then
    h[#h + 1], h[#h + 2] = 'exit', stored_exit
    stored_exit = nil
  end
  call_runs('HSET', jk, h, 1, #h, 2)
  redis.call('HDEL', jk, 'cancel_requested', 'lock_token', 'lock_expires_at', 'lq')
  if stored_exit then set_long(jk, 'exit', stored_exit) end
  if opts.failed_reason then set_long(jk, 'failed_reason', opts.failed_reason) end
  counts_add(j.queue, j.state, -1)
  counts_add(j.queue, to_state, 1)
  TALLY.finish(j.queue, to_state, now)
  if not folded then append_attempt(id, label, j.processed_at, now, opts.ledger_exit) end
  if j.has_parent ~= false then append_outbox(id, to_state, now) end
  if j.has_flow then note_settled(id, now) end
  EVENTS.emit(to_state, id, j.name, j.queue, j.am, now, opts.event_data)
  release_dedupe(j.name, j.dedupe_key, id, now)
  retain_terminal(id, j.name, to_state, j.keep, now, opts.prune ~= false)
end

-- An active job whose cancel request is honoured (by release, a Retry ack or
-- stall recovery): cancelled, with a single 'cancelled' ledger entry.
local function finish_cancelled(id, j, now)
  finish(id, j, 'cancelled', {}, now)
end

-- Put a job back into waiting with the given seq (kept or fresh); event is the
-- type of the event the transition appends (lib/events.lua), data its JSON.
local function make_waiting(id, j, seq, now, run_at, event, data)
  local jk = k_job(id)
  unlink_from_state(id, j, now)
  if run_at then
    redis.call('HSET', jk, 'state', 'waiting', 'seq', fmt(seq), 'run_at', fmt(run_at))
  else
    redis.call('HSET', jk, 'state', 'waiting', 'seq', fmt(seq))
  end
  redis.call('HDEL', jk, 'lock_token', 'lock_expires_at', 'lq')
  add_waiting(j.queue, j.name, j.priority, seq, id, j.group)
  counts_add(j.queue, j.state, -1)
  counts_add(j.queue, 'waiting', 1)
  EVENTS.emit(event, id, j.name, j.queue, j.am, now, data)
end

-- cancel(id): returns 'ok', 'notfound', or 'state' plus the current state.
local function cancel_job(id, now)
  local j = snapshot(id)
  if not j then return { 'notfound' } end
  if j.state == 'active' then
    redis.call('HSET', k_job(id), 'cancel_requested', '1')
    return { 'ok' }
  end
  if is_terminal(j.state) then return { 'state', j.state } end
  if j.state == 'waiting-children' then settle_mark_rows(id, now) end
  finish(id, j, 'cancelled', {}, now)
  return { 'ok' }
end
