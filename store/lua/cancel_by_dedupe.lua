-- cancel_by_dedupe: cancel the job a (name, dedupe key) entry points at, in
-- one atomic step (resolving the pointer and cancelling cannot race a takeover).
--
-- KEYS[1]  the store's hash tag
-- ARGV[1]  now   ARGV[2]  job name   ARGV[3]  dedupe key
--
-- Reply: {'ok', id} | {'none'} | {'notfound', id} | {'state', state, id}
local job_id = redis.call('HGET', k_dedupe(dedupe_member(ARGV[2], ARGV[3])), 'job_id')
if not job_id then return { 'none' } end
local res = cancel_job(job_id, tonumber(ARGV[1]))
res[#res + 1] = job_id
return with_owed(res)
