-- migrate_set: turn one plain sorted set of layout 2 (the all-jobs set, a name
-- or queue index: members job ids scored by enqueued_at) into a chunked set
-- (lib/chunks.lua) under the same key, a bounded batch per call
-- (manage.py migrate_store).
--
-- KEYS[1]  the store's hash tag
-- ARGV[1]  set: 'all' | 'byname' (ARGV[2] name) | 'byqueue' (ARGV[2] queue)
-- ARGV[3]  members to move in this call (at most 500)
--
-- Reply: {moved, left}: members moved by this call, members still to move.
-- The first call renames the plain set to a staging key, <tag>:migrate:<rest
-- of the key>, which frees its name for the directory; every call then pops
-- the lowest members of the staging key (ZPOPMIN) and appends them to the
-- chunked set.  A set that is already a directory (its members name chunks:
-- they hold a NUL, which no job id does) or does not exist is left alone, so
-- a stopped run is simply started again.
-- Rows single inserts left in the chunked sets' head join their chunks first.
cz_fold()
local kind, arg = ARGV[1], ARGV[2]
local dir = cz_set_key(kind, arg)
local n = math.max(1, math.min(tonumber(ARGV[3]) or 500, 500))
local stage = k_migrating(dir)
if redis.call('EXISTS', stage) == 0 then
  local head = redis.call('ZRANGE', dir, 0, 0)
  if #head == 0 or string.find(head[1], NUL, 1, true) then return { 0, 0 } end
  redis.call('RENAME', dir, stage)
end
local popped = redis.call('ZPOPMIN', stage, n)
-- ZPOPMIN answers {id, score, ...} in the set's order: no sort needed.
cz_add_sorted(dir, popped)
return { #popped / 2, redis.call('ZCARD', stage) }
