-- check_flow: mqcheck over one page of a flow's dependency rows.
--
-- KEYS[1]  the store's hash tag
-- ARGV[1]  '1' to repair, '0' to report only   ARGV[2]  flow (parent job) id
-- ARGV[3]  lex cursor: '' to start, else the last child key of the previous page
-- ARGV[4]  page size (at most 500)
--
-- Reply: {parent, pending, completed, failed, cancelled, dangling, last}.
-- parent: '' when the parent's hash is gone, else its counters joined by ','
-- (pending,completed,failed,cancelled; '-' when it holds no manifest).  The
-- next four count this page's rows by status; dangling counts child keys
-- without a row (repair: removed from the flow's index).  last: the page's
-- last child key, '' when the flow is done.  With the parent gone, a repair
-- call deletes the page's rows instead (they outlived their parent).
local repair = ARGV[1] == '1'
local flow_id = ARGV[2]
local limit = tonumber(ARGV[4])
local ck = k_flowchildren(flow_id)
local from = '-'
if ARGV[3] ~= '' then from = '(' .. ARGV[3] end
local p = redis.call('HMGET', k_job(flow_id), 'state', 'flow_pending', 'flow_completed', 'flow_failed',
  'flow_cancelled')
local parent = ''
if p[1] then
  if p[2] then
    parent = (p[2] or '0') .. ',' .. (p[3] or '0') .. ',' .. (p[4] or '0') .. ',' .. (p[5] or '0')
  else
    parent = '-'
  end
end
local keys = redis.call('ZRANGEBYLEX', ck, from, '+', 'LIMIT', 0, limit)
local n = { pending = 0, completed = 0, failed = 0, cancelled = 0 }
local dangling = 0
for _, child_key in ipairs(keys) do
  local rk = k_flowchild(flow_id, child_key)
  local status = redis.call('HGET', rk, 'status')
  if not status then
    dangling = dangling + 1
  elseif n[status] then
    n[status] = n[status] + 1
  end
  if parent == '' and repair then
    local m = flow_member(flow_id, child_key)
    redis.call('DEL', rk)
    redis.call('ZREM', ck, child_key)
    redis.call('ZREM', K_FLOW_PENDING, m)
    redis.call('ZREM', K_FLOW_CASCADE, m)
  elseif not status and repair then
    redis.call('ZREM', ck, child_key)
  end
end
local last = ''
if #keys >= limit then last = keys[#keys] end
if parent == '' and repair and redis.call('EXISTS', ck) == 0 then redis.call('SREM', K_FLOW_GC, flow_id) end
return { parent, n.pending, n.completed, n.failed, n.cancelled, dangling, last }
