-- Flow dependency rows (they live in the parent's store).
--
-- Row hash fields: child_key, store_key, child_job_id, name, spec (the child's
-- full request JSON, verbatim), status (pending|completed|failed|cancelled),
-- exit (absent = none), failed_reason, cascaded ('0'/'1'), pending_since.
-- Indexes: flowchildren:<flow> (score 0, lex = child-key order), flow:pending
-- (sweep eligibility time), flow:cascade (rows owing a cancel cascade, by
-- eligibility time), flow:owes (per parent: rows owing cascades, so retention
-- checks are O(1)), flow:gc (flows whose rows outlived their parent).

local ROW_BUDGET = 500

-- Delete up to ROW_BUDGET rows of a flow; a bigger remainder is left to the
-- flow sweeper's garbage collection.
local function delete_flow_rows(flow_id)
  local ck = k_flowchildren(flow_id)
  local keys = redis.call('ZRANGEBYLEX', ck, '-', '+', 'LIMIT', 0, ROW_BUDGET)
  for _, child_key in ipairs(keys) do
    local m = flow_member(flow_id, child_key)
    redis.call('DEL', k_flowchild(flow_id, child_key))
    redis.call('ZREM', K_FLOW_PENDING, m)
    redis.call('ZREM', K_FLOW_CASCADE, m)
  end
  if #keys > 0 then
    redis.call('ZREMRANGEBYLEX', ck, '[' .. keys[1], '[' .. keys[#keys])
  end
  if redis.call('EXISTS', ck) == 1 then
    redis.call('SADD', K_FLOW_GC, flow_id)
  end
end

-- Flip a page of a flow's still-pending rows to cancelled / not cascaded
-- (they now owe a cancel into the child's store).  Returns the number flipped
-- and the last child key examined when more rows may remain (else nil).
local function flip_pending_rows(flow_id, after, now)
  local ck = k_flowchildren(flow_id)
  local from = '-'
  if after and after ~= '' then from = '(' .. after end
  local keys = redis.call('ZRANGEBYLEX', ck, from, '+', 'LIMIT', 0, ROW_BUDGET)
  local flipped = 0
  for _, child_key in ipairs(keys) do
    local rk = k_flowchild(flow_id, child_key)
    if redis.call('HGET', rk, 'status') == 'pending' then
      local m = flow_member(flow_id, child_key)
      redis.call('HSET', rk, 'status', 'cancelled', 'cascaded', '0')
      redis.call('ZREM', K_FLOW_PENDING, m)
      redis.call('ZADD', K_FLOW_CASCADE, now, m)
      flipped = flipped + 1
    end
  end
  if flipped > 0 then redis.call('HINCRBY', K_FLOW_OWES, flow_id, flipped) end
  if #keys >= ROW_BUDGET then return flipped, keys[#keys] end
  return flipped, nil
end

-- A parked parent settles terminally (cancel, fail-fast, cancel racing the
-- fan-out): its pending counter moves to cancelled at once (O(1)), and its
-- pending rows flip in bounded pages (the rest is owed work).  Reports for
-- rows not flipped yet cannot apply: the parent is no longer parked.
local function settle_mark_rows(flow_id, now)
  local jk = k_job(flow_id)
  local pending = tonumber(redis.call('HGET', jk, 'flow_pending'))
  if pending then
    redis.call('HSET', jk, 'flow_pending', '0')
    redis.call('HINCRBY', jk, 'flow_cancelled', pending)
  end
  local _, last = flip_pending_rows(flow_id, nil, now)
  if last then owe('rows', flow_id, last) end
end
