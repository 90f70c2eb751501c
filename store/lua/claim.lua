-- claim: take the best waiting job of a queue whose name the caller handles.
--
-- KEYS[1]  the store's hash tag
-- ARGV     the claim layout (read_claim_args in lib/claim_ack.lua) with no
--          acks and one token: now, lock duration ms, queue, 0, 1, token,
--          then the job names this caller handles
--
-- Reply: {'claimed', id, <HGETALL pairs>[, 'limited']} | {'empty', next_run_at
-- or ''} | {'throttled', until ms, 'concurrency' | 'rate'} (queue limits) |
-- {'again', ''} (claim again; owed promotions come as '!owed'; see claim_next
-- in lib/claim_ack.lua).
local a = read_claim_args(ARGV)
return with_owed(claim_next(a.now, a.tokens[1], a.lock_ms, a.queue, a.names, {}))
