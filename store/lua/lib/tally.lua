-- Counters summed over one call.  A batch of acks and claims moves the same
-- counter fields again and again (each job: waiting -1, active +1, active -1,
-- completed +1; the finished counters; the run aggregates of its minute and
-- hour): the call adds them up here and writes each field once when it ends
-- (TALLY.flush, run by the call's wrapper in store/scripts.py just before the
-- events are appended), so a drained job costs a share of a few HINCRBYs
-- instead of nine.  The script is still one atomic step: no other client sees
-- the counters before the rows they count.
--
-- tally_add and tally_run take keys (local functions, so the key-discipline
-- check sees every caller). A read of a tallied field inside the call must
-- add what is pending (TALLY.pending): see uncount in lib/rows.lua.  A Function library keeps
-- this table between calls; begin_call empties it (a call that failed
-- half-way).
local TALLY = { h = {}, order = {}, runs = {}, run_order = {} }

-- HINCRBY key field n, at the end of the call.
local function tally_add(key, field, n)
  local h = TALLY.h[key]
  if not h then
    h = {}
    TALLY.h[key] = h
    TALLY.order[#TALLY.order + 1] = key
  end
  h[field] = (h[field] or 0) + n
end

-- What the call has added to key's field so far, not yet written.
function TALLY.pending(key, field)
  local h = TALLY.h[key]
  return h and h[field] or 0
end

-- One run of the per-job-name run aggregates (see record_run in
-- lib/claim_ack.lua): bucket b<bucket> +1, f +1 when failed, x the longest run
-- in ms.  ttl_ms is set on the hash when a bucket field is first created.
local function tally_run(key, ttl_ms, failed, ms, bucket)
  local r = TALLY.runs[key]
  if not r then
    r = { ttl = ttl_ms, b = {}, border = {}, f = 0, x = -1 }
    TALLY.runs[key] = r
    TALLY.run_order[#TALLY.run_order + 1] = key
  end
  local field = 'b' .. bucket
  if not r.b[field] then r.border[#r.border + 1] = field end
  r.b[field] = (r.b[field] or 0) + 1
  if failed then r.f = r.f + 1 end
  if ms > r.x then r.x = ms end
end

function TALLY.reset()
  TALLY.h, TALLY.order, TALLY.runs, TALLY.run_order = {}, {}, {}, {}
end

-- Write what the call tallied: one HINCRBY per field that changed; per run
-- aggregate hash, one HINCRBY per bucket used, the expiry when a bucket field
-- is new, the failures, and the longest run when it grew.  Fields and keys go
-- out in the order they were first touched.
function TALLY.flush()
  for _, key in ipairs(TALLY.order) do
    for field, n in pairs(TALLY.h[key]) do
      if n ~= 0 then redis.call('HINCRBY', key, field, n) end
    end
  end
  for _, key in ipairs(TALLY.run_order) do
    local r = TALLY.runs[key]
    local new = false
    for _, field in ipairs(r.border) do
      local n = r.b[field]
      if redis.call('HINCRBY', key, field, n) == n then new = true end
    end
    if new then redis.call('PEXPIRE', key, r.ttl) end
    if r.f > 0 then redis.call('HINCRBY', key, 'f', r.f) end
    local max = tonumber(redis.call('HGET', key, 'x') or '-1')
    if r.x > max then redis.call('HSET', key, 'x', r.x) end
  end
  if #TALLY.order > 0 or #TALLY.run_order > 0 then TALLY.reset() end
end
