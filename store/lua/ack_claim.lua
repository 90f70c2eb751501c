-- ack_claim: ack a held run, then claim the next job of a queue, in one call.
--
-- KEYS[1]  the store's hash tag
-- ARGV[1]  now   ARGV[2]  id   ARGV[3]  token   ARGV[4]  outcome
-- ARGV[5]  exit JSON ('' = none)   ARGV[6]  retry delay ms
-- ARGV[7]  next token   ARGV[8]  lock duration ms   ARGV[9]  queue
-- ARGV[10..]  the job names the caller handles
--
-- Reply: {ack reply (2 entries, the second '' when the ack failed),
--         claim reply ('claimed', id, pairs | 'empty', next_run_at | 'again', '')}.
-- 'again': the claim stopped short (owed promotions, dangling members; see
-- claim_next) and the caller claims once more.
-- The claim runs whatever the ack's outcome: a worker whose ack was refused
-- (lock lost) still wants its next job.
local now = tonumber(ARGV[1])
local exit_json = ARGV[5]
if exit_json == '' then exit_json = nil end
local acked = ack_job(now, ARGV[2], ARGV[3], ARGV[4], exit_json, tonumber(ARGV[6]) or 0)
local names = {}
for i = 10, #ARGV do names[#names + 1] = ARGV[i] end
local claimed = claim_next(now, ARGV[7], tonumber(ARGV[8]), ARGV[9], names)
return with_owed({ acked[1], acked[2] or '', claimed[1], claimed[2], claimed[3] or '' })
