-- sweep_dedupes: one bounded page of the dedupe-registry sweep.
--
-- KEYS[1]  the store's hash tag
-- ARGV[1]  phase: 'window' (entries whose window ended) or 'pending'
--          (pending-mode entries whose job is gone or terminal)
-- ARGV[2]  now   ARGV[3]  page size
-- ARGV[4]  pending phase: lex cursor ('-' to start, else '(' .. last member)
--
-- Reply: {scanned, pruned, last member or ''}.  The pending phase walks the
-- whole lex-ordered set by cursor, so live entries never hide dead ones.
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
  local job_id = redis.call('HGET', k_dedupe(member), 'job_id')
  local state = job_id and redis.call('HGET', k_job(job_id), 'state')
  if (not state) or is_terminal(state) then
    dedupe_unregister(member)
    pruned = pruned + 1
  end
end
return { #members, pruned, members[#members] or '' }
