-- Chunked sorted sets: the all-jobs set and the name/queue list indexes.
--
-- A sorted set of more than zset-max-listpack-entries (128) members is a
-- skiplist, ~110 bytes a member; a listpack costs ~25.  A chunked set keeps
-- its members, scored and ordered exactly like one sorted set ((score, id),
-- ids compared as bytes), in chunks of at most CZ_CAP members that stay
-- listpacks, under a directory:
--
--   directory  <index key>                 sorted set, one entry per chunk:
--              member '<lower bound id> NUL <chunk number>', score the lower
--              bound's score.  The directory's own order is the chunks' order
--              (a NUL sorts before every byte an id can hold).
--   chunk      <index key> NUL <number>    sorted set of <= CZ_CAP members,
--              all >= its lower bound and < the next chunk's.
--   <tag>:ixseq     counter drawing chunk numbers (store-wide)
--   <tag>:ixcount   hash: index key -> members (the index's O(1) size)
--
-- Every operation reads and writes O(log chunks + CZ_CAP): the chunk that
-- holds (score, id) is found by a binary search of the directory.  A chunk
-- is never let past CZ_CAP members (a listpack that converts to a skiplist
-- does not convert back): a full chunk is split before an insert, or, for an
-- append past the last member, a new chunk is opened.  Removals drop an empty
-- chunk and merge a sparse one (< CZ_MIN) into a neighbour when both fit.
-- Mirrors store/chunks.py.
local CZ_CAP, CZ_MIN = 128, 32
local CZ = {}

-- Byte-wise string order (Lua's own < follows the server's locale).
function CZ.lt(a, b)
  local la, lb = #a, #b
  for i = 1, math.min(la, lb) do
    local x, y = string.byte(a, i), string.byte(b, i)
    if x ~= y then return x < y end
  end
  return la < lb
end

-- (sa, ia) sorts before (sb, ib) in the set's ascending order (scores numbers).
function CZ.before(sa, ia, sb, ib)
  if sa ~= sb then return sa < sb end
  return CZ.lt(ia, ib)
end

function CZ.chunk(dir, n) return dir .. NUL .. n end

-- The lower bound id and chunk number of a directory member.
-- An entry without a NUL (not written by the store) names no chunk: it reads
-- as an empty one, which the listings heal away.
function CZ.parse(m)
  local at = string.find(m, NUL, 1, true)
  if not at then return m, '' end
  return string.sub(m, 1, at - 1), string.sub(m, at + 1)
end

local function cz_count(dir, n)
  if n ~= 0 then redis.call('HINCRBY', B .. ':ixcount', dir, n) end
end

-- Open a chunk whose lower bound is (s, id): its directory entry; the chunk
-- key exists once a member is added.  Returns the chunk key.
local function cz_open(dir, s, id)
  local n = tostring(redis.call('INCR', B .. ':ixseq'))
  redis.call('ZADD', dir, s, id .. NUL .. n)
  return CZ.chunk(dir, n)
end

-- The directory entry of the chunk that holds (or would hold) (score, id):
-- member, 0-based rank (nil when it is the last entry and the rank was not
-- needed), or nil when (score, id) sorts before every lower bound (or the
-- directory is empty).  sn is the score as a number, s as Redis takes it.
function CZ.locate(dir, sn, s, id)
  local last = redis.call('ZRANGE', dir, -1, -1, 'WITHSCORES')
  if #last == 0 then return nil end
  if not CZ.before(sn, id, tonumber(last[2]), (CZ.parse(last[1]))) then return last[1], nil end
  local lo = redis.call('ZCOUNT', dir, '-inf', '(' .. s)
  local hi = lo + redis.call('ZCOUNT', dir, s, s)
  -- Entries [lo, hi) share score s: find the first whose bound id is above id.
  while lo < hi do
    local mid = math.floor((lo + hi) / 2)
    local m = redis.call('ZRANGE', dir, mid, mid)[1]
    if CZ.lt(id, (CZ.parse(m))) then hi = mid else lo = mid + 1 end
  end
  if lo == 0 then return nil end
  return redis.call('ZRANGE', dir, lo - 1, lo - 1)[1], lo - 1
end

-- Move every member of chunk src into chunk dst (both fit in one).
local function cz_move(src, dst)
  local flat = redis.call('ZRANGE', src, 0, -1, 'WITHSCORES')
  if #flat == 0 then return end
  local args = {}
  for i = 1, #flat, 2 do
    args[i], args[i + 1] = flat[i + 1], flat[i]
  end
  redis.call('ZADD', dst, unpack(args))
  redis.call('DEL', src)
end

-- Add id with score s (a string, as Redis takes it) to the chunked set dir.
-- Returns 1 when the member is new, 0 when it was there (its score updated
-- when it stays in the same chunk).
function CZ.add(dir, s, id)
  local sn = tonumber(s)
  local m, rank = CZ.locate(dir, sn, s, id)
  local is_last = m and rank == nil
  if not m then
    local first = redis.call('ZRANGE', dir, 0, 0)
    if #first == 0 then
      redis.call('ZADD', cz_open(dir, s, id), s, id)
      cz_count(dir, 1)
      return 1
    end
    -- Before the first lower bound: the first chunk takes it and its bound moves down.
    local _, n = CZ.parse(first[1])
    redis.call('ZREM', dir, first[1])
    m = id .. NUL .. n
    redis.call('ZADD', dir, s, m)
    is_last = redis.call('ZCARD', dir) == 1
  end
  local _, n = CZ.parse(m)
  local ck = CZ.chunk(dir, n)
  if redis.call('ZCARD', ck) >= CZ_CAP then
    -- A member already there (an index heal re-adds it) is no reason to split.
    if redis.call('ZSCORE', ck, id) then return redis.call('ZADD', ck, s, id) end
    if is_last then
      local top = redis.call('ZRANGE', ck, -1, -1, 'WITHSCORES')
      if CZ.before(tonumber(top[2]), top[1], sn, id) then
        -- An append past a full last chunk opens the next one.
        redis.call('ZADD', cz_open(dir, s, id), s, id)
        cz_count(dir, 1)
        return 1
      end
    end
    -- Split: the upper half moves to a new chunk.
    local upper = redis.call('ZRANGE', ck, CZ_CAP / 2, -1, 'WITHSCORES')
    local args, rem = {}, {}
    for i = 1, #upper, 2 do
      args[i], args[i + 1] = upper[i + 1], upper[i]
      rem[#rem + 1] = upper[i]
    end
    redis.call('ZREM', ck, unpack(rem))
    local ck2 = cz_open(dir, upper[2], upper[1])
    redis.call('ZADD', ck2, unpack(args))
    if not CZ.before(sn, id, tonumber(upper[2]), upper[1]) then ck = ck2 end
  end
  local added = redis.call('ZADD', ck, s, id)
  cz_count(dir, added)
  return added
end

-- Add many members at once: flat {score, id, score, id, ...} (scores as
-- strings).  Sorted first; when they all come after the set's last member
-- (a chunk of inserts, nearly always), they fill the last chunk and new ones
-- in order, CZ_CAP members a ZADD; otherwise one add each.  Returns the
-- number of new members.
function CZ.add_many(dir, flat)
  local items = {}
  for i = 1, #flat, 2 do items[#items + 1] = { tonumber(flat[i]), flat[i + 1], flat[i] } end
  if #items == 0 then return 0 end
  table.sort(items, function(x, y) return CZ.before(x[1], x[2], y[1], y[2]) end)
  local ck, card = nil, 0
  local last = redis.call('ZRANGE', dir, -1, -1, 'WITHSCORES')
  if #last > 0 then
    local bound_id, n = CZ.parse(last[1])
    ck = CZ.chunk(dir, n)
    local top = redis.call('ZRANGE', ck, -1, -1, 'WITHSCORES')
    local after
    if #top > 0 then
      after = CZ.before(tonumber(top[2]), top[1], items[1][1], items[1][2])
    else
      after = not CZ.before(items[1][1], items[1][2], tonumber(last[2]), bound_id)
    end
    if not after then
      local added = 0
      for _, it in ipairs(items) do added = added + CZ.add(dir, it[3], it[2]) end
      return added
    end
    card = redis.call('ZCARD', ck)
  end
  local added, i = 0, 1
  while i <= #items do
    if not ck or card >= CZ_CAP then
      ck, card = cz_open(dir, items[i][3], items[i][2]), 0
    end
    local take = math.min(CZ_CAP - card, #items - i + 1)
    local args = {}
    for j = i, i + take - 1 do
      args[#args + 1] = items[j][3]
      args[#args + 1] = items[j][2]
    end
    added = added + redis.call('ZADD', ck, unpack(args))
    card, i = card + take, i + take
  end
  cz_count(dir, added)
  return added
end

-- A chunk's lower bound is its first member: when that member leaves, the
-- bound moves up to the new first one (it stays above the previous chunk's
-- members), so the directory never names a job that is gone.  Returns the
-- directory member now naming the chunk.
local function cz_rebound(dir, m, ck, id)
  local bound, n = CZ.parse(m)
  if bound ~= id then return m end
  local head = redis.call('ZRANGE', ck, 0, 0, 'WITHSCORES')
  if #head == 0 then return m end
  redis.call('ZREM', dir, m)
  m = head[1] .. NUL .. n
  redis.call('ZADD', dir, head[2], m)
  return m
end

-- After member id left chunk ck (directory member m): drop the chunk's entry
-- when it is empty; move its bound; merge a sparse chunk with a neighbour
-- when both fit.
local function cz_settle(dir, m, ck, rank, id)
  local card = redis.call('ZCARD', ck)
  if card == 0 then
    redis.call('ZREM', dir, m)
    return
  end
  m = cz_rebound(dir, m, ck, id)
  if card >= CZ_MIN then return end
  rank = rank or redis.call('ZRANK', dir, m)
  if not rank then return end
  local nxt = redis.call('ZRANGE', dir, rank + 1, rank + 1)[1]
  if nxt then
    local _, n2 = CZ.parse(nxt)
    local ck2 = CZ.chunk(dir, n2)
    if card + redis.call('ZCARD', ck2) <= CZ_CAP then
      cz_move(ck2, ck)
      redis.call('ZREM', dir, nxt)
      return
    end
  end
  if rank > 0 then
    local prv = redis.call('ZRANGE', dir, rank - 1, rank - 1)[1]
    local _, n0 = CZ.parse(prv)
    local ck0 = CZ.chunk(dir, n0)
    if card + redis.call('ZCARD', ck0) <= CZ_CAP then
      cz_move(ck, ck0)
      redis.call('ZREM', dir, m)
    end
  end
end

-- Remove id, scored s, from the chunked set dir.  Returns 1 when it was there.
-- A member is found by its score: an id the set holds under another score is
-- not found (mqcheck and the listings drop such a stale member).
-- It always issues a ZREM (of nothing when the member is not found): a delete
-- that starts with it still runs on a full server (noeviction), where Redis
-- refuses a memory-growing command only as a script's first write.
function CZ.rem(dir, s, id)
  local m, rank
  if s then
    s = tostring(s)
    m, rank = CZ.locate(dir, tonumber(s), s, id)
  end
  if not m then
    redis.call('ZREM', dir, id) -- a directory member is never a bare id: a no-op
    return 0
  end
  local _, n = CZ.parse(m)
  local ck = CZ.chunk(dir, n)
  if redis.call('ZREM', ck, id) == 0 then return 0 end
  cz_count(dir, -1)
  cz_settle(dir, m, ck, rank, id)
  return 1
end

-- Drop a member met in chunk ck of dir (a listing's or a check's heal): no
-- merge, so a reader walking the chunks by rank keeps its place; an emptied
-- chunk's directory entry goes.  Returns true when the directory entry went.
function CZ.drop(dir, ck, id)
  local score = redis.call('ZSCORE', ck, id)
  if not score then return false end
  local m = CZ.locate(dir, tonumber(score), score, id)
  redis.call('ZREM', ck, id)
  cz_count(dir, -1)
  if not (m and CZ.chunk(dir, select(2, CZ.parse(m))) == ck) then return false end
  if redis.call('EXISTS', ck) == 1 then
    cz_rebound(dir, m, ck, id)
    return false
  end
  redis.call('ZREM', dir, m)
  return true
end

-- Whether id, scored s, is in the chunked set dir.
function CZ.has(dir, s, id)
  if not s then return false end
  s = tostring(s)
  local m = CZ.locate(dir, tonumber(s), s, id)
  if not m then return false end
  local _, n = CZ.parse(m)
  return redis.call('ZSCORE', CZ.chunk(dir, n), id) ~= false
end
