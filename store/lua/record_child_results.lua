-- record_child_results: apply a batch (at most 500) of child reports, then
-- settle each touched flow at most once.
--
-- KEYS[1]  the store's hash tag
-- ARGV[1]  now   ARGV[2]  n, then n reports of 5 strings: flow_id, child_key,
--          outcome (completed|failed|cancelled), exit JSON ('' = none),
--          failed_reason ('' = none)
--
-- Reply: a flat array of n (applied, parent_settled) pairs of '1'/'0'.
-- Phase 1 applies every row update in batch order: a report applies only to a
-- row that is still pending while its parent is parked in waiting-children
-- (duplicates, late, unknown and in-batch repeated reports do not).  Phase 2
-- settles each touched flow once: fail-fast (the first applied failure of the
-- batch settles the parent failed) wins over a pending count of zero (the
-- parent goes back to waiting for its collect phase; its last applied report
-- is the one that settled it).
local now = tonumber(ARGV[1])
local n = tonumber(ARGV[2])
local out = {}
local flows, order = {}, {}
for i = 0, n - 1 do
  local b = 3 + i * 5
  local flow_id, child_key, outcome = ARGV[b], ARGV[b + 1], ARGV[b + 2]
  local exit_json, reason = ARGV[b + 3], ARGV[b + 4]
  out[2 * i + 1], out[2 * i + 2] = '0', '0'
  local f = flows[flow_id]
  if not f then
    local p = redis.call('HMGET', k_job(flow_id), 'state', 'flow_pending', 'flow_fail_fast', 'queue', 'name', 'seq')
    f = {
      parked = p[1] == 'waiting-children' and p[2] ~= false and is_row(p[1], p[4], p[5], p[6]),
      fail_fast = p[3] == '1',
    }
    flows[flow_id] = f
    order[#order + 1] = flow_id
  end
  local rk = k_flowchild(flow_id, child_key)
  if f.parked and redis.call('HGET', rk, 'status') == 'pending' then
    redis.call('HSET', rk, 'status', outcome, 'cascaded', '1')
    if exit_json ~= '' then redis.call('HSET', rk, 'exit', exit_json) end
    if reason ~= '' then redis.call('HSET', rk, 'failed_reason', reason) end
    redis.call('ZREM', K_FLOW_PENDING, flow_member(flow_id, child_key))
    local jk = k_job(flow_id)
    if tonumber(redis.call('HINCRBY', jk, 'flow_pending', -1)) < 0 then
      redis.call('HSET', jk, 'flow_pending', '0')
    end
    local bucket = 'flow_cancelled'
    if outcome == 'completed' then bucket = 'flow_completed' elseif outcome == 'failed' then bucket = 'flow_failed' end
    redis.call('HINCRBY', jk, bucket, 1)
    out[2 * i + 1] = '1'
    f.last = i
    if outcome == 'failed' and not f.first_failed then
      f.first_failed, f.failed_key = i, child_key
    end
  end
end

for _, flow_id in ipairs(order) do
  local f = flows[flow_id]
  if f.parked and f.last then
    local j = snapshot(flow_id)
    if f.fail_fast and f.first_failed then
      settle_mark_rows(flow_id, now)
      finish(flow_id, j, 'failed', { ledger = 'failed',
        failed_reason = 'effect-mq: flow child "' .. f.failed_key .. '" failed' }, now)
      out[2 * f.first_failed + 2] = '1'
    elseif tonumber(redis.call('HGET', k_job(flow_id), 'flow_pending')) == 0 then
      make_waiting(flow_id, j, redis.call('INCR', K_SEQ), now, now, 'waiting')
      wake(j.queue)
      out[2 * f.last + 2] = '1'
    end
  end
end
return with_owed(out)
