-- Counters summed over one call.  A batch of acks and claims moves the same
-- counter fields again and again (each job: waiting -1, active +1, active -1,
-- completed +1; the finished counters; the run aggregates of its minute and
-- hour): the call adds them up here, by queue, state and job name, and writes
-- each field once when it ends (TALLY.flush, run by the call's wrapper in
-- store/scripts.py just before the events are appended).  Per job that is a
-- few table updates instead of nine HINCRBYs and the strings they need; the
-- field names and keys are built once per call.  The script is still one
-- atomic step: no other client sees the counters before the rows they count.
--
-- A read of a state counter inside the call must add what is pending
-- (TALLY.pending): see uncount in lib/rows.lua.  A Function library keeps
-- this table between calls; begin_call empties it (a call that failed
-- half-way).
--
-- Per-job-name run aggregates (the dashboard's metrics page reads them): each
-- run adds to the hash of its minute and of its clock hour: b<i> counts runs
-- of at most 2^(i/4) ms of run time (claim -> ack; bucket 0: up to 1 ms, the
-- last bucket takes everything longer), so the runs are the sum of the
-- buckets; f counts failed runs (Fail or Retry acks) and x holds the longest
-- run in ms.  A hash expires a while after the window that reads it (minutes
-- after about 3 h, hours after about 75 h; the expiry is set when a bucket
-- field is first created, so a later bucket pushes it out by at most the
-- hash's own span).  bucket_log is log(2) / 4, written out: a Redis 7
-- Function library has no math table while it loads.
local TALLY = {
  counts = {}, finished = {}, runs = {}, now = nil, dirty = false,
  bucket_log = 0.17328679513998632, bucket_last = 100,
  minute_ttl_ms = 3 * 3600000, hour_ttl_ms = 75 * 3600000,
}

-- The state counter of (queue, state) moves by n (K_COUNTS, field
-- "<queue>|<state>").
function TALLY.count(queue, state, n)
  local q = TALLY.counts[queue]
  if not q then
    q = {}
    TALLY.counts[queue] = q
  end
  q[state] = (q[state] or 0) + n
  TALLY.dirty = true
end

-- What the call has added to the (queue, state) counter so far, not yet written.
function TALLY.pending(queue, state)
  local q = TALLY.counts[queue]
  return q and q[state] or 0
end

-- Counters keyed by time (the finished counts per minute, the run
-- aggregates) are summed for one time: a call that moves on to another time
-- writes what it has first.
local function tally_at(now)
  if TALLY.now ~= now then
    if TALLY.now then TALLY.flush() end
    TALLY.now = now
  end
  TALLY.dirty = true
end

-- A job of queue reached the terminal state at now: the lifetime finished
-- counter ("<queue>|<state>") and the store's count of the state per minute.
function TALLY.finish(queue, state, now)
  tally_at(now)
  local q = TALLY.finished[queue]
  if not q then
    q = {}
    TALLY.finished[queue] = q
  end
  q[state] = (q[state] or 0) + 1
end

-- The bucket of a run of ms milliseconds.
function TALLY.bucket(ms)
  if ms <= 1 then return 0 end
  local i = math.ceil(math.log(ms) / TALLY.bucket_log - 1e-9)
  if i > TALLY.bucket_last then return TALLY.bucket_last end
  return i
end

-- A run of the job name, ended at now, ms long; failed for a Fail or Retry.
function TALLY.run(name, now, failed, ms)
  tally_at(now)
  local r = TALLY.runs[name]
  if not r then
    r = { b = {}, order = {}, f = 0, x = -1 }
    TALLY.runs[name] = r
  end
  local bucket = TALLY.bucket(ms)
  if not r.b[bucket] then r.order[#r.order + 1] = bucket end
  r.b[bucket] = (r.b[bucket] or 0) + 1
  if failed then r.f = r.f + 1 end
  if ms > r.x then r.x = ms end
end

function TALLY.reset()
  TALLY.counts, TALLY.finished, TALLY.runs, TALLY.now, TALLY.dirty = {}, {}, {}, nil, false
end

-- One run aggregate hash: a HINCRBY per bucket used, the expiry when a bucket
-- field is new, the failures, and the longest run when it grew.
local function tally_write_runs(key, ttl_ms, r)
  local new = false
  for _, bucket in ipairs(r.order) do
    local n = r.b[bucket]
    if redis.call('HINCRBY', key, 'b' .. bucket, n) == n then new = true end
  end
  if new then redis.call('PEXPIRE', key, ttl_ms) end
  if r.f > 0 then redis.call('HINCRBY', key, 'f', r.f) end
  local max = tonumber(redis.call('HGET', key, 'x') or '-1')
  if r.x > max then redis.call('HSET', key, 'x', r.x) end
end

-- Write what the call tallied: one HINCRBY per counter field that changed,
-- the run aggregates per job name.
function TALLY.flush()
  if not TALLY.dirty then return end
  for queue, states in pairs(TALLY.counts) do
    for state, n in pairs(states) do
      if n ~= 0 then redis.call('HINCRBY', K_COUNTS, queue .. '|' .. state, n) end
    end
  end
  local now = TALLY.now
  if now then
    local per_state = {}
    for queue, states in pairs(TALLY.finished) do
      for state, n in pairs(states) do
        redis.call('HINCRBY', k_finished_total(), queue .. '|' .. state, n)
        per_state[state] = (per_state[state] or 0) + n
      end
    end
    local minute = math.floor(now / 60000)
    local minute_s = string.format('%.0f', minute)
    for state, n in pairs(per_state) do
      redis.call('HINCRBY', K_STATS .. state, minute_s, n)
    end
    local hour = math.floor(now / 3600000)
    for name, r in pairs(TALLY.runs) do
      tally_write_runs(k_jobmetrics_minute(minute, name), TALLY.minute_ttl_ms, r)
      tally_write_runs(k_jobmetrics_hour(hour, name), TALLY.hour_ttl_ms, r)
    end
  end
  TALLY.reset()
end
