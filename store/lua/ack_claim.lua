-- ack_claim: ack a held run, then claim the next job of a queue, in one call.
--
-- KEYS[1]  the store's hash tag
-- ARGV     the claim layout (read_claim_args in lib/claim_ack.lua) with one
--          ack and one token: now, lock duration ms, queue, 1, id, token,
--          outcome, exit JSON ('' = none), retry delay ms, 1, next token, then
--          the job names the caller handles
--
-- Reply: {ack reply (2 entries, the second '' when the ack failed),
--         claim reply ('claimed', id, pairs | 'empty', next_run_at, '' |
--         'throttled', until ms, reason | 'again', '', '')}.
-- 'again': the claim stopped short (owed promotions, dangling members; see
-- claim_next) and the caller claims once more.
-- The claim runs whatever the ack's outcome: a worker whose ack was refused
-- (lock lost) still wants its next job.
local a = read_claim_args(ARGV)
local acked = run_ack(a.now, a.acks[1])
local claimed = claim_next(a.now, a.tokens[1], a.lock_ms, a.queue, a.names, {})
return with_owed({ acked[1], acked[2] or '', claimed[1], claimed[2], claimed[3] or '' })
