-- fan_out: the FanOut ack of a flow parent, one chunk (at most 500 children).
--
-- KEYS[1]  the store's hash tag
-- ARGV[1]  now   ARGV[2]  parent id   ARGV[3]  token
-- ARGV[4]  '1' on the final chunk   ARGV[5]  '1' to clear rows staged by an
--          earlier, crashed attempt (a bounded page per call; see the reply)
-- ARGV[6]  fail_fast '1'/'0'   ARGV[7]  manifest size (all chunks)
-- ARGV[8]  n, then n children of 5 strings: child_key, store_key,
--          child_job_id, name, spec JSON
--
-- Reply: {'ok', queue} | {'more'} (clearing: call again) | {'notfound'} |
-- {'locklost'} | {'badmanifest', staged} (final chunk: the staged rows do not
-- number the manifest size, e.g. duplicate child keys; nothing committed).
-- Non-final chunks only stage rows under the token guard; the final chunk
-- commits the manifest and the state.  No attempt is consumed: the budget
-- spans both phases.  A manifest that already landed is kept (a second
-- fan-out converges on it) and its state decides the transition.
local now = tonumber(ARGV[1])
local id, token = ARGV[2], ARGV[3]
local final, clear = ARGV[4] == '1', ARGV[5] == '1'
local total = tonumber(ARGV[7])
local n = tonumber(ARGV[8])

local j = snapshot(id)
if not j then return ack_missing(id) end
if j.state ~= 'active' or j.lock_token ~= token then return { 'locklost' } end
local jk = k_job(id)
local has_manifest = redis.call('HEXISTS', jk, 'flow_pending') == 1
local ck = k_flowchildren(id)

if not has_manifest then
  if clear then
    local keys = redis.call('ZRANGEBYLEX', ck, '-', '+', 'LIMIT', 0, ROW_BUDGET)
    for _, child_key in ipairs(keys) do
      local m = flow_member(id, child_key)
      redis.call('DEL', k_flowchild(id, child_key))
      redis.call('ZREM', K_FLOW_PENDING, m)
      redis.call('ZREM', K_FLOW_CASCADE, m)
      redis.call('ZREM', ck, child_key)
    end
    if #keys >= ROW_BUDGET then return { 'more' } end
  end
  for i = 0, n - 1 do
    local b = 9 + i * 5
    local child_key = ARGV[b]
    redis.call('DEL', k_flowchild(id, child_key))
    redis.call('HSET', k_flowchild(id, child_key), 'child_key', child_key, 'store_key', ARGV[b + 1],
      'child_job_id', ARGV[b + 2], 'name', ARGV[b + 3], 'spec', ARGV[b + 4], 'status', 'pending',
      'cascaded', '0', 'pending_since', fmt(now))
    redis.call('ZADD', ck, 0, child_key)
    redis.call('ZADD', K_FLOW_PENDING, now, flow_member(id, child_key))
  end
end
if not final then return { 'ok', j.queue } end

local pending
if has_manifest then
  pending = tonumber(redis.call('HGET', jk, 'flow_pending'))
else
  local staged = redis.call('ZCARD', ck)
  if staged ~= total then return { 'badmanifest', staged } end
  redis.call('HSET', jk, 'flow_fail_fast', ARGV[6], 'flow_pending', fmt(total),
    'flow_completed', '0', 'flow_failed', '0', 'flow_cancelled', '0')
  pending = total
end
append_attempt(id, 'fanned-out', j.processed_at, now, nil)

if j.cancel_requested then
  -- A cancel raced the fan-out: the manifest stays, its rows owe cascades.
  settle_mark_rows(id, now)
  finish_cancelled(id, j, now)
elseif pending > 0 then
  redis.call('ZREM', K_ACTIVE, id)
  if j.limited then LIMITS.leave(id, j.queue, now, j.group) end
  redis.call('HSET', jk, 'state', 'waiting-children')
  park(id, j, now)
  redis.call('HDEL', jk, 'lock_token', 'lock_expires_at', 'lq')
  counts_add(j.queue, 'active', -1)
  counts_add(j.queue, 'waiting-children', 1)
  EVENTS.emit('waiting-children', id, j.name, j.queue, j.am, now, '{"pending":' .. fmt(pending) .. '}')
else
  make_waiting(id, j, redis.call('INCR', K_SEQ), now, now, 'waiting')
  wake(j.queue)
end
return with_owed({ 'ok', j.queue })
