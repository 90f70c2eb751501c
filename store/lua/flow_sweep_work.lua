-- flow_sweep_work: one bounded page of repair work for the flow sweeper.
--
-- KEYS[1]  the store's hash tag
-- ARGV[1]  now   ARGV[2]  pending age ms   ARGV[3]  limit (rows per class)
--
-- Reply: {reconcile, cascade, gc} where reconcile is a flat array of
-- (flow_id, child_key, store_key, spec) for pending rows of parked parents
-- untouched for pending age (each returned row is re-armed, so full pages
-- rotate), cascade a flat array of (flow_id, child_key, store_key,
-- child_job_id) for rows owing a cancel cascade (re-armed likewise, so rows
-- one sweeper cannot act on never starve the rest), and gc the number of
-- orphaned rows deleted.  Self-heals: staged rows of vanished or
-- manifest-less terminal parents are purged, rows of a settled parent still
-- marked pending are flipped, stale index members dropped.
local now = tonumber(ARGV[1])
local age = tonumber(ARGV[2])
local limit = tonumber(ARGV[3])

local function split(member)
  local at = string.find(member, NUL, 1, true)
  return string.sub(member, 1, at - 1), string.sub(member, at + 1)
end

local function purge_row(flow_id, child_key, member)
  redis.call('DEL', k_flowchild(flow_id, child_key))
  redis.call('ZREM', k_flowchildren(flow_id), child_key)
  redis.call('ZREM', K_FLOW_PENDING, member)
  redis.call('ZREM', K_FLOW_CASCADE, member)
end

local reconcile = {}
local members = redis.call('ZRANGEBYSCORE', K_FLOW_PENDING, '-inf', now - age, 'LIMIT', 0, limit)
for _, member in ipairs(members) do
  local flow_id, child_key = split(member)
  local p = redis.call('HMGET', k_job(flow_id), 'state', 'flow_pending')
  local rk = k_flowchild(flow_id, child_key)
  local row = redis.call('HMGET', rk, 'status', 'store_key', 'spec')
  if (not p[1]) or (is_terminal(p[1]) and not p[2]) then
    purge_row(flow_id, child_key, member)
  elseif not row[1] or row[1] ~= 'pending' then
    redis.call('ZREM', K_FLOW_PENDING, member)
  elseif p[1] ~= 'waiting-children' then
    if is_terminal(p[1]) then
      -- A settle whose row flips were interrupted: finish this row's flip.
      redis.call('HSET', rk, 'status', 'cancelled', 'cascaded', '0')
      redis.call('ZREM', K_FLOW_PENDING, member)
      redis.call('ZADD', K_FLOW_CASCADE, now, member)
      redis.call('HINCRBY', K_FLOW_OWES, flow_id, 1)
    else
      redis.call('ZADD', K_FLOW_PENDING, now, member)
    end
  else
    reconcile[#reconcile + 1] = flow_id
    reconcile[#reconcile + 1] = child_key
    reconcile[#reconcile + 1] = row[2]
    reconcile[#reconcile + 1] = row[3]
    redis.call('ZADD', K_FLOW_PENDING, now, member)
  end
end

local cascade = {}
members = redis.call('ZRANGEBYSCORE', K_FLOW_CASCADE, '-inf', now, 'LIMIT', 0, limit)
for _, member in ipairs(members) do
  local flow_id, child_key = split(member)
  local row = redis.call('HMGET', k_flowchild(flow_id, child_key), 'status', 'cascaded', 'store_key', 'child_job_id')
  if row[1] == 'cancelled' and row[2] == '0' then
    cascade[#cascade + 1] = flow_id
    cascade[#cascade + 1] = child_key
    cascade[#cascade + 1] = row[3]
    cascade[#cascade + 1] = row[4]
    redis.call('ZADD', K_FLOW_CASCADE, now + age, member)
  else
    redis.call('ZREM', K_FLOW_CASCADE, member)
  end
end

-- Rows that outlived their parent (deleted with more rows than one call may
-- delete): remove a bounded page, unless a new job took the parent's id.
local gc = 0
local flow_id = redis.call('SRANDMEMBER', K_FLOW_GC)
if flow_id then
  if redis.call('EXISTS', k_job(flow_id)) == 1 then
    redis.call('SREM', K_FLOW_GC, flow_id)
  else
    local ck = k_flowchildren(flow_id)
    local keys = redis.call('ZRANGEBYLEX', ck, '-', '+', 'LIMIT', 0, limit)
    for _, child_key in ipairs(keys) do
      purge_row(flow_id, child_key, flow_member(flow_id, child_key))
      gc = gc + 1
    end
    if redis.call('EXISTS', ck) == 0 then redis.call('SREM', K_FLOW_GC, flow_id) end
  end
end
return { reconcile, cascade, gc }
