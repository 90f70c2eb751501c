-- ack_claim_many: ack a batch of held runs, then claim up to k next jobs of a
-- queue, in one call (a prefetching worker's hot path).
--
-- KEYS[1]  the store's hash tag
-- ARGV[1]  now   ARGV[2]  lock duration ms   ARGV[3]  queue
-- ARGV[4]  n acks, then n acks of 5 strings: id, token, outcome, exit JSON
--          ('' = none), retry delay ms
-- then k, then k lock tokens for the claims, then the handled job names
--
-- Reply: {ack replies (n pairs: code, queue or ''), claimed (flat: id, pairs,
-- id, pairs, ...), next_run_at or '' (set when the queue ran dry), or '!again'
-- when a claim stopped short (owed promotions, dangling members; see
-- claim_next): the caller claims the rest again}
local now = tonumber(ARGV[1])
local lock_ms = tonumber(ARGV[2])
local queue = ARGV[3]
local n = tonumber(ARGV[4])
local acks = {}
for i = 0, n - 1 do
  local b = 5 + i * 5
  local exit_json = ARGV[b + 3]
  if exit_json == '' then exit_json = nil end
  local r = ack_job(now, ARGV[b], ARGV[b + 1], ARGV[b + 2], exit_json, tonumber(ARGV[b + 4]) or 0)
  acks[#acks + 1] = r[1]
  acks[#acks + 1] = r[2] or ''
end
local at = 5 + n * 5
local k = tonumber(ARGV[at])
local names = {}
for i = at + 1 + k, #ARGV do names[#names + 1] = ARGV[i] end
local claimed = {}
local next_run_at = ''
for i = 1, k do
  local c = claim_next(now, ARGV[at + i], lock_ms, queue, names)
  if c[1] ~= 'claimed' then
    next_run_at = c[2]
    if c[1] == 'again' then next_run_at = '!again' end
    break
  end
  claimed[#claimed + 1] = c[2]
  claimed[#claimed + 1] = c[3]
end
return with_owed({ acks, claimed, next_run_at })
