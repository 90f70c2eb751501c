-- index_tail: index one page of rows enqueued at or after a given time.
--
-- KEYS[1]  the store's hash tag
-- ARGV[1]  kind: 'name' | 'queue'   ARGV[2]  min enqueued_at
-- ARGV[3]  rank offset inside that tail   ARGV[4]  page size (at most 500)
--
-- Reply: the number of rows scanned.  Pages go by rank from the first row
-- with enqueued_at >= min; a row deleted meanwhile can shift a later one past
-- a page boundary, which the next boot's tail heal covers.
local kind = ARGV[1]
local first = redis.call('ZCOUNT', K_ALL, '-inf', '(' .. ARGV[2])
local from = first + tonumber(ARGV[3])
local ids = redis.call('ZRANGE', K_ALL, from, from + tonumber(ARGV[4]) - 1)
for _, id in ipairs(ids) do
  local f = redis.call('HMGET', k_job(id), 'name', 'queue', 'enqueued_at')
  if f[1] and f[2] and f[3] then
    if kind == 'name' then
      redis.call('ZADD', k_byname(f[1]), f[3], id)
    else
      redis.call('ZADD', k_byqueue(f[2]), f[3], id)
    end
  end
end
return #ids
