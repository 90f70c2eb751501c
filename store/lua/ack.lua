-- ack: record the outcome of a run the caller holds the lock for.
--
-- KEYS[1]  the store's hash tag
-- ARGV[1]  now   ARGV[2]  id   ARGV[3]  token
-- ARGV[4]  outcome: 'complete' | 'fail' | 'cancelled' | 'retry'
-- ARGV[5]  exit JSON ('' = no exit)   ARGV[6]  retry delay ms
--
-- Reply: {'ok', queue} | {'notfound'} | {'locklost'}
-- Every outcome consumes an attempt.  Complete and Fail store the exit and win
-- over a pending cancel; Retry on a cancel-requested job ends it cancelled.
local now = tonumber(ARGV[1])
local id, token, outcome = ARGV[2], ARGV[3], ARGV[4]
local exit_json = ARGV[5]
if exit_json == '' then exit_json = nil end

local j = snapshot(id)
if not j then return { 'notfound' } end
if j.state ~= 'active' or j.lock_token ~= token then return { 'locklost' } end

local jk = k_job(id)
redis.call('HINCRBY', jk, 'attempts_made', 1)

if outcome == 'complete' then
  finish(id, j, 'completed', { store_exit = true, exit_json = exit_json, ledger_exit = exit_json }, now)
elseif outcome == 'fail' then
  finish(id, j, 'failed', { store_exit = true, exit_json = exit_json, ledger_exit = exit_json }, now)
elseif outcome == 'cancelled' or j.cancel_requested then
  finish_cancelled(id, j, now)
else
  -- Retry: back of the line with a fresh seq, after the delay.
  local delay = math.max(0, tonumber(ARGV[6]) or 0)
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
