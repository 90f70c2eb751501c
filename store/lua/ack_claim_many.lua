-- ack_claim_many: ack a batch of held runs, then claim up to k next jobs of a
-- queue, in one call (a prefetching worker's hot path).
--
-- KEYS[1]  the store's hash tag
-- ARGV     the claim layout (read_claim_args in lib/claim_ack.lua): now, lock
--          duration ms, queue, n, then n acks of 5 strings (id, token,
--          outcome, exit JSON ('' = none), retry delay ms), then k, then k
--          lock tokens for the claims, then the handled job names
--
-- Reply: {ack replies (n pairs: code, queue or ''), claimed (flat: id, pairs,
-- id, pairs, ...), next_run_at or '' (set when the queue ran dry), or '!again'
-- when a claim stopped short (owed promotions, dangling members; see
-- claim_next): the caller claims the rest again, or '!<reason>:<until ms>'
-- when a queue limit held the rest back (reason 'concurrency' or 'rate'), or
-- '!limited:' when the queue has limits (one claim per batch)}
local a = read_claim_args(ARGV)
local acks = {}
-- The acks' set writes are held and written per set after the last ack
-- (HELD in lib/retention.lua), before any claim of the call.
HELD.on = true
for _, ack in ipairs(a.acks) do
  local r = run_ack(a.now, ack)
  acks[#acks + 1] = r[1]
  acks[#acks + 1] = r[2] or ''
end
flush_held()
HELD.on = false
local claimed = {}
local next_run_at = ''
local batch = { defer = true, active = {} }
for i, token in ipairs(a.tokens) do
  batch.want = #a.tokens - i + 1
  local c = claim_next(a.now, token, a.lock_ms, a.queue, a.names, batch)
  if c[1] ~= 'claimed' then
    next_run_at = c[2]
    if c[1] == 'again' then next_run_at = '!again' end
    if c[1] == 'throttled' then next_run_at = '!' .. c[3] .. ':' .. c[2] end
    break
  end
  claimed[#claimed + 1] = c[2]
  claimed[#claimed + 1] = c[3]
  if c[4] then
    -- A limited queue: one job per batch, so that a prefetching worker never
    -- holds claimed jobs it is not running while other workers wait for a slot.
    if #claimed < 2 * #a.tokens then next_run_at = '!limited:' end
    break
  end
end
claim_batch_end(batch, a.queue, a.names)
return with_owed({ acks, claimed, next_run_at })
