-- sweep_dedupes: one bounded page of the dedupe-registry sweep.
--
-- KEYS[1]  the store's hash tag
-- ARGV[1]  phase: 'window' (entries whose window ended) or 'pending'
--          (pending-mode entries whose job is gone or terminal)
-- ARGV[2]  now   ARGV[3]  page size
-- ARGV[4]  pending phase: lex cursor ('-' to start, else '(' .. last member)
--
-- Reply: {scanned, pruned, last member or ''}.  The pending phase walks the
-- whole lex-ordered set by cursor, so live entries never hide dead ones; an
-- entry that carries a window is moved to the window index, never pruned here.
local phase = ARGV[1]
local now = tonumber(ARGV[2])
local limit = tonumber(ARGV[3])
local pruned = 0
if phase == 'window' then
  local members = redis.call('ZRANGEBYSCORE', K_DEDUPE_WINDOWS, '-inf', now, 'LIMIT', 0, limit)
  for _, member in ipairs(members) do
    dedupe_unregister(member)
    pruned = pruned + 1
  end
  return { #members, pruned, '' }
end
local members = redis.call('ZRANGEBYLEX', K_DEDUPE_PENDING, ARGV[4], '+', 'LIMIT', 0, limit)
for _, member in ipairs(members) do
  local e = redis.call('HMGET', k_dedupe(member), 'job_id', 'expires_at')
  if e[2] then
    -- A window entry listed as pending: it belongs to the window index and
    -- lives until its window ends, whatever happened to its job.
    redis.call('ZREM', K_DEDUPE_PENDING, member)
    redis.call('ZADD', K_DEDUPE_WINDOWS, e[2], member)
  else
    local state = e[1] and redis.call('HGET', k_job(e[1]), 'state')
    if (not state) or is_terminal(state) then
      dedupe_unregister(member)
      pruned = pruned + 1
    end
  end
end
return { #members, pruned, members[#members] or '' }
