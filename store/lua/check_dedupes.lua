-- check_dedupes: mqcheck over one page of the dedupe registry.
--
-- KEYS[1]  the store's hash tag
-- ARGV[1]  now   ARGV[2]  '1' to repair, '0' to report only
-- ARGV[3]  what: 'entries' (ARGV[4..] are entry members "<name>NUL<key>" found
--          as dedupe hashes) | 'pending' | 'window' (members of that index)
-- ARGV[4..]  members (at most 500)
--
-- Reply: flat (kind, member, detail) triples:
--   dedupe_dangling   an entry whose job is gone although the entry still
--                     claims it (pending mode, or a window that ended), an
--                     entry without a job id, or an index member without an
--                     entry (repair: the entry is unregistered)
--   dedupe_unindexed  an entry missing from its index (repair: indexed)
--   wrong_set_member  an entry listed in the other index (repair: removed there)
-- A live window whose job is gone is fine: a window outlives its job.
local now = tonumber(ARGV[1])
local repair = ARGV[2] == '1'
local what = ARGV[3]
local out = {}
local function report(kind, member, detail)
  out[#out + 1] = kind
  out[#out + 1] = member
  out[#out + 1] = detail
end

for i = 4, #ARGV do
  local member = ARGV[i]
  local dk = k_dedupe(member)
  if what == 'entries' then
    if redis.call('EXISTS', dk) == 1 then
      local e = redis.call('HMGET', dk, 'job_id', 'expires_at')
      local job_id, expires_at = e[1], tonumber(e[2])
      local job_gone = (not job_id) or redis.call('EXISTS', k_job(job_id)) == 0
      if not job_id then
        report('dedupe_dangling', member, 'no job id')
        if repair then dedupe_unregister(member) end
      elseif job_gone and ((not e[2]) or (expires_at or 0) <= now) then
        report('dedupe_dangling', member, job_id)
        if repair then dedupe_unregister(member) end
      elseif e[2] then
        if not redis.call('ZSCORE', K_DEDUPE_WINDOWS, member) then
          report('dedupe_unindexed', member, 'window')
          if repair then redis.call('ZADD', K_DEDUPE_WINDOWS, expires_at or now, member) end
        end
        if redis.call('ZSCORE', K_DEDUPE_PENDING, member) then
          report('wrong_set_member', member, 'dedupes:pending (entry has a window)')
          if repair then redis.call('ZREM', K_DEDUPE_PENDING, member) end
        end
      else
        if not redis.call('ZSCORE', K_DEDUPE_PENDING, member) then
          report('dedupe_unindexed', member, 'pending')
          if repair then redis.call('ZADD', K_DEDUPE_PENDING, 0, member) end
        end
        if redis.call('ZSCORE', K_DEDUPE_WINDOWS, member) then
          report('wrong_set_member', member, 'dedupes:window (entry has no window)')
          if repair then redis.call('ZREM', K_DEDUPE_WINDOWS, member) end
        end
      end
    end
  else
    local index = K_DEDUPE_PENDING
    if what == 'window' then index = K_DEDUPE_WINDOWS end
    if redis.call('ZSCORE', index, member) and redis.call('EXISTS', dk) == 0 then
      report('dedupe_dangling', member, 'index member without an entry')
      if repair then redis.call('ZREM', index, member) end
    end
  end
end
return out
