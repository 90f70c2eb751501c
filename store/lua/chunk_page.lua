-- chunk_page: the next members of a chunked set (lib/chunks.lua), in
-- (score, id) order (ascending, or descending with ARGV[7] 'desc'), after a
-- cursor.
--
-- KEYS[1]  the store's hash tag
-- ARGV[1]  set: 'all' | 'byname' (ARGV[2] name) | 'byqueue' (ARGV[2] queue)
-- ARGV[3]  '1' when a cursor follows: ARGV[4] score, ARGV[5] id (exclusive;
--          id '' = every member of that score and after)
-- ARGV[6]  page size (at most 500)   ARGV[7]  'desc' for newest first ('' asc)
--
-- Reply: {done, id1, score1, id2, score2, ...}; done = '1' when the set has
-- nothing after the page.  The cursor is a value, not a rank, so a walk over
-- many calls is not thrown off by chunks split or merged between them: each
-- member present for the whole walk is returned once.  At most one chunk per
-- member returned, plus one, is read.
-- Rows single inserts left in the chunked sets' head join their chunks first.
cz_fold()
local kind, arg = ARGV[1], ARGV[2]
local dir = cz_set_key(kind, arg)
local has_cursor = ARGV[3] == '1'
local cs, cid = ARGV[4], ARGV[5]
local cv = tonumber(cs)
local limit = math.min(tonumber(ARGV[6]) or 500, 500)
local desc = ARGV[7] == 'desc'

local rank = desc and redis.call('ZCARD', dir) - 1 or 0
if has_cursor then
  local m, r = cz_locate(dir, cv, cs, cid)
  if m then
    rank = r or redis.call('ZRANK', dir, m)
  elseif desc then
    return { '1' } -- nothing sorts before the cursor
  end
end
local out, found, reads = { '0' }, 0, 0
while true do
  if found >= limit or reads > limit then return out end
  local entry = rank >= 0 and redis.call('ZRANGE', dir, rank, rank)[1]
  if not entry then break end
  local _, n = cz_parse(entry)
  local ck = cz_chunk(dir, n)
  local flat = desc and redis.call('ZREVRANGE', ck, 0, -1, 'WITHSCORES')
    or redis.call('ZRANGE', ck, 0, -1, 'WITHSCORES')
  reads = reads + 1
  for i = 1, #flat, 2 do
    local after
    if not has_cursor then
      after = true
    elseif desc then
      after = cz_before(tonumber(flat[i + 1]), flat[i], cv, cid)
    else
      after = cz_before(cv, cid, tonumber(flat[i + 1]), flat[i])
    end
    if after then
      if found >= limit then return out end
      out[#out + 1] = flat[i]
      out[#out + 1] = flat[i + 1]
      found = found + 1
    end
  end
  rank = desc and rank - 1 or rank + 1
end
out[1] = '1'
return out
