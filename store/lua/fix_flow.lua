-- fix_flow: mqcheck's repair of a flow parent's counters, compare-and-set.
--
-- KEYS[1]  the store's hash tag
-- ARGV[1]  flow (parent job) id
-- ARGV[2..5]  the counters mqcheck read (pending, completed, failed, cancelled)
-- ARGV[6..9]  the counts of the flow's rows by status, in the same order
--
-- Reply: 1 when set, 0 when the parent changed since it was read.
local jk = k_job(ARGV[1])
local f = redis.call('HMGET', jk, 'flow_pending', 'flow_completed', 'flow_failed', 'flow_cancelled')
if not f[1] then return 0 end
for i = 1, 4 do
  if (tonumber(f[i]) or 0) ~= tonumber(ARGV[1 + i]) then return 0 end
end
redis.call('HSET', jk, 'flow_pending', ARGV[6], 'flow_completed', ARGV[7], 'flow_failed', ARGV[8],
  'flow_cancelled', ARGV[9])
return 1
