-- mark_children_cascaded: record that the named rows no longer owe a cancel
-- into their child's store.
--
-- KEYS[1]  the store's hash tag
-- ARGV[1]  flow id   ARGV[2..]  child keys (at most 500)
--
-- Reply: the number of rows that owed a cascade and no longer do.  Unknown keys
-- are ignored; marking twice is harmless.
local flow_id = ARGV[1]
local settled = 0
for i = 2, #ARGV do
  local rk = k_flowchild(flow_id, ARGV[i])
  local f = redis.call('HMGET', rk, 'status', 'cascaded')
  if f[1] then
    if f[1] == 'cancelled' and f[2] == '0' then settled = settled + 1 end
    redis.call('HSET', rk, 'cascaded', '1')
  end
  redis.call('ZREM', K_FLOW_CASCADE, flow_member(flow_id, ARGV[i]))
end
if settled > 0 and tonumber(redis.call('HINCRBY', K_FLOW_OWES, flow_id, -settled)) <= 0 then
  redis.call('HDEL', K_FLOW_OWES, flow_id)
end
return settled
