-- recover_stalled: one bounded page of jobs whose lock expired.
--
-- KEYS[1]  the store's hash tag
-- ARGV[1]  now   ARGV[2]  max stalled count   ARGV[3]  page size
--
-- Reply: {examined, requeued, id1, failed1, id2, failed2, ...} where failedN
-- is '1' when the stall limit failed the job.  Jobs whose pending cancel was
-- honoured are not listed.  A requeue publishes a broadcast wake.  Members
-- whose row is not active any more are dropped from the active zset; a
-- member whose row is gone (or a remnant without its identifying fields) is
-- dropped with its active counter.
local now = tonumber(ARGV[1])
local max_stalled = tonumber(ARGV[2])
local expired = redis.call('ZRANGEBYSCORE', K_ACTIVE, '-inf', now, 'LIMIT', 0, tonumber(ARGV[3]))
local out = { #expired, 0 }
local requeued = 0
for _, id in ipairs(expired) do
  local j = snapshot(id)
  if not j then
    drop_active_orphan(id)
  elseif j.state ~= 'active' then
    redis.call('ZREM', K_ACTIVE, id)
  elseif j.cancel_requested then
    finish_cancelled(id, j, now)
  else
    local jk = k_job(id)
    local stalled = redis.call('HINCRBY', jk, 'stalled_count', 1)
    if stalled > max_stalled then
      -- The ledger's only entry for this run is 'stalled'; keep pruning is not
      -- applied on this path (the contract's reference behaviour).
      record_error(id, j, nil, 'job stalled more than allowable limit', now)
      EVENTS.emit('stalled', id, j.name, j.queue, j.am, now, nil)
      finish(id, j, 'failed', { ledger = 'stalled', prune = false,
        failed_reason = 'job stalled more than allowable limit' }, now)
      out[#out + 1] = id; out[#out + 1] = '1'
    else
      append_attempt(id, 'stalled', j.processed_at, now, nil)
      make_waiting(id, j, j.seq, now, nil, 'stalled')
      requeued = requeued + 1
      out[#out + 1] = id; out[#out + 1] = '0'
    end
  end
end
out[2] = requeued
if requeued > 0 then wake('*') end
return with_owed(out)
