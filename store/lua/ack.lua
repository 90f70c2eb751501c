-- ack: record the outcome of a run the caller holds the lock for.
--
-- KEYS[1]  the store's hash tag
-- ARGV[1]  now   ARGV[2]  id   ARGV[3]  token
-- ARGV[4]  outcome: 'complete' | 'fail' | 'cancelled' | 'retry'
-- ARGV[5]  exit JSON ('' = no exit)   ARGV[6]  retry delay ms
--
-- Reply: {'ok', queue} | {'notfound'} | {'locklost'}
-- Every outcome consumes an attempt.  Complete and Fail store the exit and win
-- over a pending cancel; Retry on a cancel-requested job ends it cancelled.
local exit_json = ARGV[5]
if exit_json == '' then exit_json = nil end
return with_owed(ack_job(tonumber(ARGV[1]), ARGV[2], ARGV[3], ARGV[4], exit_json, tonumber(ARGV[6]) or 0))
