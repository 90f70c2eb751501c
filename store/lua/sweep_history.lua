-- sweep_history: one bounded page of the history sweep.
--
-- KEYS[1]  the store's hash tag
-- ARGV[1]  phase: 'ttl' (the store's history_ttl ceiling for one state) or
--          'age' (rows whose own keep.age_ms ran out, any terminal state)
-- ARGV[2]  now   ARGV[3]  page size   ARGV[4]  offset (rows skipped so far)
-- ARGV[5]  state (ttl phase)   ARGV[6]  cutoff: finished_at <= cutoff is due (ttl phase)
--
-- Reply: {scanned, deleted, skipped}.  Only due rows are read, so a page never
-- walks young history.  Parents that still owe flow cascades are skipped (the
-- caller moves its offset past them); stale index members are dropped, and
-- dangling ones (hash gone) with the counter they held.
local phase = ARGV[1]
local now = tonumber(ARGV[2])
local limit, offset = tonumber(ARGV[3]), tonumber(ARGV[4])
local source, upto, expect
if phase == 'ttl' then
  expect = ARGV[5]
  source, upto = k_finished(expect), ARGV[6]
else
  source, upto = K_KEEPAGE, ARGV[2]
end
local ids = redis.call('ZRANGEBYSCORE', source, '-inf', upto, 'LIMIT', offset, limit)
local deleted, skipped = 0, 0
for _, id in ipairs(ids) do
  local f = redis.call('HMGET', k_job(id), 'state', 'queue', 'name', 'seq')
  local state = f[1]
  local row = is_row(f[1], f[2], f[3], f[4])
  local stale = (not state) or (expect and state ~= expect) or ((not expect) and not is_terminal(state))
  if not row and redis.call('EXISTS', k_job(id)) == 0 then
    -- Dangling (the hash is gone): drop it, with its counter when known.
    redis.call('ZREM', source, id)
    if expect then
      local queue = orphan_queue(id, expect)
      if queue then uncount(queue, expect) end
    end
    deleted = deleted + 1
  elseif stale or not row then
    if row then redis.call('ZREM', source, id) else delete_job(id) end
    deleted = deleted + 1
  elseif owes_cascades(id) then
    skipped = skipped + 1
  else
    delete_job(id)
    deleted = deleted + 1
  end
end
return { #ids, deleted, skipped }
