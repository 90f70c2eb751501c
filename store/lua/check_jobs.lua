-- check_jobs: mqcheck over one page of job hashes (report, optionally repair).
--
-- KEYS[1]  the store's hash tag
-- ARGV[1]  now   ARGV[2]  '1' to repair, '0' to report only
-- ARGV[3]  index flags ("11" = name, queue indexes on)
-- ARGV[4..]  job ids (at most 500; ids whose hash is gone by now are skipped)
--
-- Reply: {tallies, problems}.  tallies: flat (queue|state, rows) pairs of the
-- usable rows read (mqcheck compares them with the O(1) counters).  problems:
-- flat (kind, id, detail) triples:
--   partial_hash             the hash lacks state, queue, name or seq, or has an
--                            unknown state (repair: the remnant is deleted)
--   missing_from_all         not in the all-jobs set under its enqueued_at (repair:
--                            added; a row without enqueued_at gets now)
--   missing_from_state_set   not in the set of its state (repair: added, with
--                            the score that state uses)
--   missing_from_index       not in an enabled name/queue index (repair: added)
--   stray_lock               lock fields on a job that is not active (repair:
--                            the lock fields are deleted)
-- Each page is one atomic call, so a row is never judged half-written.
-- Rows single inserts left in the chunked sets' head join their chunks first.
cz_fold()
local now = tonumber(ARGV[1])
local repair = ARGV[2] == '1'
local idx = ARGV[3]
local STATES = {
  waiting = true, delayed = true, active = true, ['waiting-children'] = true,
  completed = true, failed = true, cancelled = true,
}
local tally, order, out = {}, {}, {}
local function report(kind, id, detail)
  out[#out + 1] = kind
  out[#out + 1] = id
  out[#out + 1] = detail
end
local function missing(key, member) return not redis.call('ZSCORE', key, member) end
-- The chunked sets (all, the indexes) are looked up by the job's enqueued_at.
local function unlisted(dir, score, id) return not cz_has(dir, score, id) end

for i = 4, #ARGV do
  local id = ARGV[i]
  local jk = k_job(id)
  local f = redis.call('HMGET', jk, 'state', 'queue', 'name', 'seq', 'priority', 'run_at',
    'lock_expires_at', 'fa', 'enqueued_at', 'lock_token', 'group')
  local state, queue, name, seq = f[1], f[2], f[3], f[4]
  if is_row(state, queue, name, seq) and STATES[state] then
    local field = queue .. '|' .. state
    if not tally[field] then
      tally[field] = 0
      order[#order + 1] = field
    end
    tally[field] = tally[field] + 1
    local enqueued = f[9]
    if repair and not enqueued then
      -- A row without its enqueue time gets one: the chunked sets are scored by it.
      enqueued = fmt(now)
      redis.call('HSET', jk, 'enqueued_at', enqueued)
    end
    if unlisted(K_ALL, enqueued, id) then
      report('missing_from_all', id, '')
      if repair then cz_add(K_ALL, enqueued, id) end
    end
    if state == 'waiting' and f[11] then
      -- A grouped job waits in its group's set and its (queue, name) set, and
      -- its group takes turns or is held back by its limits (LIMITS.group_row).
      if not LIMITS.group_row(queue, name, f[11], waiting_member(seq, id)) then
        report('missing_from_state_set', id, 'waiting')
        if repair then
          add_waiting(queue, name, f[5] or '0', seq, id, f[11])
          LIMITS.group_row(queue, name, f[11], waiting_member(seq, id), true)
        end
      end
    elseif state == 'waiting' then
      if missing(k_waiting(queue, name), waiting_member(seq, id)) then
        report('missing_from_state_set', id, 'waiting')
        if repair then add_waiting(queue, name, f[5] or '0', seq, id) end
      end
    elseif state == 'delayed' then
      if missing(k_delayed(queue), id) then
        report('missing_from_state_set', id, 'delayed')
        if repair then redis.call('ZADD', k_delayed(queue), f[6] or fmt(now), id) end
      end
    elseif state == 'active' then
      if missing(K_ACTIVE, id) then
        -- Added with its lock expiry (or now): stalled recovery takes it from there.
        report('missing_from_state_set', id, 'active')
        if repair then redis.call('ZADD', K_ACTIVE, f[7] or fmt(now), id) end
      end
    elseif is_terminal(state) then
      local at = f[8] or fmt(now)
      if missing(k_finished(state), id) or missing(k_terminal(name, state), id) then
        report('missing_from_state_set', id, state)
        if repair then
          redis.call('ZADD', k_finished(state), at, id)
          redis.call('ZADD', k_terminal(name, state), at, id)
        end
      end
    end
    if string.byte(idx, 1) == 49 and unlisted(k_byname(name), enqueued, id) then
      report('missing_from_index', id, 'name')
      if repair then cz_add(k_byname(name), enqueued, id) end
    end
    if string.byte(idx, 2) == 49 and unlisted(k_byqueue(queue), enqueued, id) then
      report('missing_from_index', id, 'queue')
      if repair then cz_add(k_byqueue(queue), enqueued, id) end
    end
    if state ~= 'active' and (f[10] or f[7]) then
      report('stray_lock', id, state)
      if repair then redis.call('HDEL', jk, 'lock_token', 'lock_expires_at') end
    end
  elseif redis.call('EXISTS', jk) == 1 then
    report('partial_hash', id, state or '')
    if repair then delete_remnant(id) end
  end
end
local tallies = {}
for _, field in ipairs(order) do
  tallies[#tallies + 1] = field
  tallies[#tallies + 1] = tally[field]
end
return { tallies, out }
