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
--   <tag>:ixcount   hash: index key -> members in its chunks
--   <tag>:ixpend    list: the head, rows a single insert appended and no
--                   chunk holds yet (insert_job, cz_fold), 5 items a row
--
-- A set's members are those of its chunks and its rows in the head; its size
-- is its ixcount field plus those rows.  The head holds fewer than
-- 128 rows: the insert that fills it moves them into the chunks.
-- Every script that reads or changes the chunks folds the head first
-- (cz_fold: once per call), so only the insert itself ever sees it.
--
-- Every operation reads and writes O(log chunks + CZ_CAP): the chunk that
-- holds (score, id) is found by a binary search of the directory.  A chunk
-- is never let past CZ_CAP members (a listpack that converts to a skiplist
-- does not convert back): a full chunk is split before an insert, or, for an
-- append past the last member, a new chunk is opened.  Removals drop an empty
-- chunk and merge a sparse one (< CZ_MIN) into a neighbour when both fit.
-- Mirrors store/chunks.py.  CZ_CAP is half the listpack limit: a listpack
-- ZADD costs ~1 us a member for a chunk this size, and filling 64-member
-- chunks took 7 % less Redis time per bulk-enqueued job than 128-member ones
-- for 1 % more memory (bench/README.md).  Chunks written by layout 3 (up to
-- 128 members) are still within the limit and are split at CZ_CAP.
local CZ_CAP, CZ_MIN = 64, 16
-- Whether this call folded the head already (reset by begin_call; cz_fold is
-- declared here, defined below with its helpers).  The head holds at most 128
-- rows (insert_job folds it when a row makes 128).
local CZ_FOLDED, cz_fold = false, nil
-- The head: rows it holds at most (insert_job folds it when a row makes
-- CZ_HEAD_ROWS), items per row.  Mirrors store/chunks.py HEAD_ROWS, HEAD_ROW_ITEMS.
local CZ_HEAD_ROWS, CZ_HEAD_ROW_ITEMS = 128, 5

-- Byte-wise string order (Lua's own < follows the server's locale).
local function cz_lt(a, b)
  local la, lb = #a, #b
  for i = 1, math.min(la, lb) do
    local x, y = string.byte(a, i), string.byte(b, i)
    if x ~= y then return x < y end
  end
  return la < lb
end

-- (sa, ia) sorts before (sb, ib) in the set's ascending order (scores numbers).
local function cz_before(sa, ia, sb, ib)
  if sa ~= sb then return sa < sb end
  return cz_lt(ia, ib)
end

local function cz_chunk(dir, n) return dir .. NUL .. n end

-- The lower bound id and chunk number of a directory member.
-- An entry without a NUL (not written by the store) names no chunk: it reads
-- as an empty one, which the listings heal away.
local function cz_parse(m)
  local at = string.find(m, NUL, 1, true)
  if not at then return m, '' end
  return string.sub(m, 1, at - 1), string.sub(m, at + 1)
end

-- The chunked set a script's ARGV names: 'all', or 'byname' / 'byqueue' and
-- the name or queue (an unknown kind is an error).
local function cz_set_key(kind, arg)
  if kind == 'all' then return K_ALL end
  if kind == 'byname' then return k_byname(arg) end
  if kind == 'byqueue' then return k_byqueue(arg) end
  error('unknown chunked set ' .. tostring(kind))
end

-- A reply {member, score, ...} (ZRANGE WITHSCORES, ZPOPMIN) as ZADD's
-- {score, member, ...}.
local function cz_zadd_args(flat)
  local args = {}
  for k = 1, #flat, 2 do
    args[k], args[k + 1] = flat[k + 1], flat[k]
  end
  return args
end

local function cz_count(dir, n)
  if n ~= 0 then redis.call('HINCRBY', k_ixcount(), dir, n) end
end

-- Open a chunk whose lower bound is (s, id): its directory entry; the chunk
-- key exists once a member is added.  Returns the chunk key.
local function cz_open(dir, s, id)
  local n = tostring(redis.call('INCR', k_ixseq()))
  redis.call('ZADD', dir, s, id .. NUL .. n)
  return cz_chunk(dir, n)
end

-- The directory entry of the chunk that holds (or would hold) (score, id):
-- member, 0-based rank (nil when it is the last entry and the rank was not
-- needed), or nil when (score, id) sorts before every lower bound (or the
-- directory is empty).  sn is the score as a number, s as Redis takes it.
local function cz_locate(dir, sn, s, id)
  cz_fold()
  local last = redis.call('ZRANGE', dir, -1, -1, 'WITHSCORES')
  if #last == 0 then return nil end
  if not cz_before(sn, id, tonumber(last[2]), (cz_parse(last[1]))) then return last[1], nil end
  local lo = redis.call('ZCOUNT', dir, '-inf', '(' .. s)
  local hi = lo + redis.call('ZCOUNT', dir, s, s)
  -- Entries [lo, hi) share score s: find the first whose bound id is above id.
  while lo < hi do
    local mid = math.floor((lo + hi) / 2)
    local m = redis.call('ZRANGE', dir, mid, mid)[1]
    if cz_lt(id, (cz_parse(m))) then hi = mid else lo = mid + 1 end
  end
  if lo == 0 then return nil end
  return redis.call('ZRANGE', dir, lo - 1, lo - 1)[1], lo - 1
end

-- ZADD flat {id, score, id, score, ...}, given in ascending order, into chunk
-- ck, highest first: a listpack insert walks from the head to its place, so a
-- descending run makes every insert the first entry instead of the last
-- (measured: half the time for 128 members).
local function cz_zadd_desc(ck, flat, from, to)
  local args = {}
  for j = to - 1, from, -2 do
    args[#args + 1] = flat[j + 1]
    args[#args + 1] = flat[j]
  end
  return call_runs('ZADD', ck, args, 1, #args, 2)
end

-- Move every member of chunk src into chunk dst (both fit in one).
local function cz_move(src, dst)
  local flat = redis.call('ZRANGE', src, 0, -1, 'WITHSCORES')
  if #flat == 0 then return end
  cz_zadd_desc(dst, flat, 1, #flat)
  redis.call('DEL', src)
end

-- Add id with score s (a string, as Redis takes it) to the chunked set dir.
-- Returns 1 when the member is new, 0 when it was there (its score updated
-- when it stays in the same chunk).
local function cz_add(dir, s, id)
  local sn = tonumber(s)
  local m, rank = cz_locate(dir, sn, s, id)
  local is_last = m and rank == nil
  if not m then
    local first = redis.call('ZRANGE', dir, 0, 0)
    if #first == 0 then
      redis.call('ZADD', cz_open(dir, s, id), s, id)
      cz_count(dir, 1)
      return 1
    end
    -- Before the first lower bound: the first chunk takes it and its bound moves down.
    local _, n = cz_parse(first[1])
    redis.call('ZREM', dir, first[1])
    m = id .. NUL .. n
    redis.call('ZADD', dir, s, m)
    is_last = redis.call('ZCARD', dir) == 1
  end
  local _, n = cz_parse(m)
  local ck = cz_chunk(dir, n)
  if redis.call('ZCARD', ck) >= CZ_CAP then
    -- A member already there (an index heal re-adds it) is no reason to split.
    if redis.call('ZSCORE', ck, id) then return redis.call('ZADD', ck, s, id) end
    if is_last then
      local top = redis.call('ZRANGE', ck, -1, -1, 'WITHSCORES')
      if cz_before(tonumber(top[2]), top[1], sn, id) then
        -- An append past a full last chunk opens the next one.
        redis.call('ZADD', cz_open(dir, s, id), s, id)
        cz_count(dir, 1)
        return 1
      end
    end
    -- Split: the upper half moves to a new chunk.
    local upper = redis.call('ZRANGE', ck, CZ_CAP / 2, -1, 'WITHSCORES')
    local rem = {}
    for i = 1, #upper, 2 do rem[#rem + 1] = upper[i] end
    call_runs('ZREM', ck, rem, 1, #rem, 1)
    local ck2 = cz_open(dir, upper[2], upper[1])
    cz_zadd_desc(ck2, upper, 1, #upper)
    if not cz_before(sn, id, tonumber(upper[2]), upper[1]) then ck = ck2 end
  end
  local added = redis.call('ZADD', ck, s, id)
  cz_count(dir, added)
  return added
end

-- flat {score, id, ...} in the set's order, as {id, score, ...}.  Redis sorts
-- them in a scratch sorted set, deleted at once (its C sort is several times
-- cheaper than table.sort with a byte-wise comparison in Lua).  With rank (id
-- -> position in an order already known, e.g. the all-jobs set's part of the
-- same bulk insert) a numeric table.sort does instead.
local function cz_sorted(flat, rank)
  if rank then
    local at = {}
    for i = 1, #flat, 2 do at[#at + 1] = i end
    table.sort(at, function(x, y) return rank[flat[x + 1]] < rank[flat[y + 1]] end)
    local out = {}
    for _, i in ipairs(at) do
      out[#out + 1] = flat[i + 1]
      out[#out + 1] = flat[i]
    end
    return out
  end
  local scratch = k_czsort()
  redis.call('DEL', scratch)
  call_runs('ZADD', scratch, flat, 1, #flat, 2)
  local out = redis.call('ZRANGE', scratch, 0, -1, 'WITHSCORES')
  redis.call('DEL', scratch)
  return out
end

-- Chunks a merge may rewrite at most (then members go in one by one).
local CZ_TAIL = 8

-- Fill chunks from {id, score, ...} (the set's order) from position i on,
-- after every member of the set: the last chunk ck (card members; a card at
-- the cap opens a new one), then new chunks.  Returns the members added.
local function cz_fill(dir, ck, card, sorted, i)
  local added = 0
  while i <= #sorted do
    if card >= CZ_CAP then
      ck, card = cz_open(dir, sorted[i + 1], sorted[i]), 0
    end
    local take = math.min(CZ_CAP - card, (#sorted - i + 1) / 2)
    added = added + cz_zadd_desc(ck, sorted, i, i + 2 * take - 1)
    card, i = card + take, i + 2 * take
  end
  return added
end

-- New members that interleave with the set's last ones (a bulk insert in the
-- same millisecond as the one before, whose ids sort below its last id): the
-- chunks from the one that would hold the first new member to the end are
-- merged with them (sorted by Redis in the scratch set) and written again,
-- when they are at most CZ_TAIL.  Returns the members added, or nil when the
-- tail is longer (the caller adds them one by one).
local function cz_merge_tail(dir, sorted)
  local m, rank = cz_locate(dir, tonumber(sorted[2]), sorted[2], sorted[1])
  local total = redis.call('ZCARD', dir)
  if not m then rank = 0 elseif not rank then rank = total - 1 end
  if total - rank > CZ_TAIL then return nil end
  local scratch = k_czsort()
  redis.call('DEL', scratch)
  local before = 0
  for _, entry in ipairs(redis.call('ZRANGE', dir, rank, -1)) do
    local _, n = cz_parse(entry)
    local ck = cz_chunk(dir, n)
    local flat = redis.call('ZRANGE', ck, 0, -1, 'WITHSCORES')
    if #flat > 0 then
      local args = cz_zadd_args(flat)
      call_runs('ZADD', scratch, args, 1, #args, 2)
      before = before + #flat / 2
    end
    redis.call('DEL', ck)
  end
  redis.call('ZREMRANGEBYRANK', dir, rank, -1)
  local args = cz_zadd_args(sorted)
  call_runs('ZADD', scratch, args, 1, #args, 2)
  local union = redis.call('ZRANGE', scratch, 0, -1, 'WITHSCORES')
  redis.call('DEL', scratch)
  -- What is left of the set comes before every member of the union.
  local ck, card = dir, CZ_CAP
  local last = redis.call('ZRANGE', dir, -1, -1)
  if #last > 0 then
    local _, n = cz_parse(last[1])
    ck = cz_chunk(dir, n)
    card = redis.call('ZCARD', ck)
  end
  cz_fill(dir, ck, card, union, 1)
  local added = #union / 2 - before
  cz_count(dir, added)
  return added
end

-- Add sorted[from..to] ({id, score, ...} ascending, all new to the set and at
-- or above the lower bound of the chunk named by directory member m, below the
-- next chunk's) to that chunk: one ZADD when they fit; else up to CZ_CAP / 2 of
-- them are added and the chunk split by rank, and more are merged with the
-- chunk (in Lua, both sorted) and written again; either way as chunks of at
-- most CZ_CAP, as even as they divide.  A member the chunk holds already (an
-- index heal) sends a large group through cz_add.  Returns the members added (not
-- counted) and the chunks the one became (nil after cz_add: unknown).
local function cz_add_group(dir, m, sorted, from, to)
  local _, n = cz_parse(m)
  local ck = cz_chunk(dir, n)
  if (to - from + 1) / 2 <= CZ_CAP / 2 then
    -- A few: added as they are (the chunk, at most CZ_CAP, stays under the
    -- listpack limit of 2 * CZ_CAP on the way), then, past CZ_CAP, its upper
    -- members move to new chunks, taken from the top by rank (Redis orders
    -- them; nothing is compared here).
    local added = cz_zadd_desc(ck, sorted, from, to)
    local card = redis.call('ZCARD', ck)
    if card <= CZ_CAP then return added, 1 end
    local pieces = math.ceil(card / CZ_CAP)
    local size = math.ceil(card / pieces)
    for p = pieces - 1, 1, -1 do
      local upper = redis.call('ZRANGE', ck, p * size, -1, 'WITHSCORES')
      redis.call('ZREMRANGEBYRANK', ck, p * size, -1)
      cz_zadd_desc(cz_open(dir, upper[2], upper[1]), upper, 1, #upper)
    end
    return added, pieces
  end
  local card = redis.call('ZCARD', ck)
  if card + (to - from + 1) / 2 <= CZ_CAP then
    return cz_zadd_desc(ck, sorted, from, to), 1
  end
  local old = redis.call('ZRANGE', ck, 0, -1, 'WITHSCORES')
  local have = {}
  for a = 1, #old, 2 do have[old[a]] = true end
  for b = from, to, 2 do
    if have[sorted[b]] then
      local added = 0
      for c = from, to, 2 do added = added + cz_add(dir, sorted[c + 1], sorted[c]) end
      cz_count(dir, -added) -- cz_add counted them; the caller counts again
      return added, nil
    end
  end
  local all, a, b = {}, 1, from
  while a <= #old or b <= to do
    if b > to or (a <= #old and cz_before(tonumber(old[a + 1]), old[a], tonumber(sorted[b + 1]), sorted[b])) then
      all[#all + 1], all[#all + 2] = old[a], old[a + 1]
      a = a + 2
    else
      all[#all + 1], all[#all + 2] = sorted[b], sorted[b + 1]
      b = b + 2
    end
  end
  local total = #all / 2
  local pieces = math.ceil(total / CZ_CAP)
  local size = math.ceil(total / pieces)
  redis.call('DEL', ck)
  for p = 0, pieces - 1 do
    local first, last = 2 * p * size + 1, math.min(2 * (p + 1) * size, #all)
    if p > 0 then ck = cz_open(dir, all[first + 1], all[first]) end
    cz_zadd_desc(ck, all, first, last)
  end
  return total - card, pieces
end

-- Directory entries a spread insert reads ahead, and pages it walks before
-- it searches instead.
local CZ_PAGE, CZ_WALK = 32, 2

-- Add sorted[i..j] ({id, score, ...} ascending, new to the set, every one
-- before its last member): the members that fall in one chunk go in together
-- (cz_add_group), the chunks found by reading the directory ahead from the
-- last one (a page of CZ_PAGE entries, parsed once, at most CZ_WALK pages) or
-- by a binary search.  O(chunks touched) calls instead of a search per
-- member, when a batch interleaves with many chunks (ids that share an
-- enqueue time with earlier ones: random ids, store-assigned ids across a
-- power of ten).  Returns the members added (counted).
local function cz_add_spread(dir, sorted, i, j)
  -- pg: the page {members, bound ids, bound scores, n, base rank, at}, at the
  -- entry the last member fell in (members come in ascending order).
  local added, grouped, k, pg, walked = 0, 0, i, nil, 0
  local function read(base)
    local flat = redis.call('ZRANGE', dir, base, base + CZ_PAGE - 1, 'WITHSCORES')
    if #flat == 0 then return nil end
    local ms, ids, ss = {}, {}, {}
    for p = 1, #flat, 2 do
      local e = (p + 1) / 2
      ms[e], ids[e], ss[e] = flat[p], (cz_parse(flat[p])), tonumber(flat[p + 1])
    end
    return { ms = ms, ids = ids, ss = ss, n = #flat / 2, base = base, at = 1 }
  end
  while k <= j do
    local s, id = sorted[k + 1], sorted[k]
    local sn = tonumber(s)
    local e, last = nil, false
    while pg do
      local at = pg.at
      if cz_before(sn, id, pg.ss[at], pg.ids[at]) then
        pg = nil -- before the page (not after a group): search
      else
        while at < pg.n and not cz_before(sn, id, pg.ss[at + 1], pg.ids[at + 1]) do at = at + 1 end
        pg.at = at
        if at < pg.n then
          e = at
        elseif pg.n < CZ_PAGE then
          e, last = at, true -- the directory's last entry
        elseif walked < CZ_WALK then
          walked, pg = walked + 1, read(pg.base + at - 1)
        else
          pg = nil
        end
      end
      if e then break end
    end
    if not e then
      local m, r = cz_locate(dir, sn, s, id)
      if m then
        pg, walked = read(r or (redis.call('ZCARD', dir) - 1)), 0
        e, last = 1, pg.n == 1
      end
    end
    if not e then
      -- Before the first bound: the first chunk takes it, its bound moves down.
      added = added + cz_add(dir, s, id) -- (counted by cz_add)
      k, pg = k + 2, nil
    else
      local to = k
      if last then
        to = j + 1
      else
        local ns, nid = pg.ss[e + 1], pg.ids[e + 1]
        while to + 2 <= j and cz_before(tonumber(sorted[to + 3]), sorted[to + 2], ns, nid) do
          to = to + 2
        end
        to = to + 1
      end
      local got, pieces = cz_add_group(dir, pg.ms[e], sorted, k, to)
      added, grouped, k = added + got, grouped + got, to + 1
      if not pieces then
        pg = nil
      elseif pieces > 1 then
        -- The new chunks follow this one: read on from the first after them.
        pg, walked = read(pg.base + e - 1 + pieces), 0
      end
    end
  end
  cz_count(dir, grouped) -- (cz_add counted its own)
  return added
end

-- Add members given as {id, score, ...} in the set's order: when they all come
-- after the set's last member (nearly every bulk insert) they fill the last
-- chunk and new ones, CZ_CAP members a ZADD; when they interleave with its
-- last members, the tail is merged (cz_merge_tail) or, past CZ_TAIL chunks,
-- those before the last member go in one by one.  Returns the members added.
local function cz_add_sorted(dir, sorted)
  if #sorted == 0 then return 0 end
  cz_fold()
  local added, i = 0, 1
  -- No chunk yet: a card at the cap makes the first member open one.
  local ck, card = dir, CZ_CAP
  local last = redis.call('ZRANGE', dir, -1, -1, 'WITHSCORES')
  if #last > 0 then
    local bound_id, n = cz_parse(last[1])
    ck = cz_chunk(dir, n)
    local top = redis.call('ZRANGE', ck, -1, -1, 'WITHSCORES')
    local ts, tid = tonumber(last[2]), bound_id
    if #top > 0 then ts, tid = tonumber(top[2]), top[1] end
    if not cz_before(ts, tid, tonumber(sorted[2]), sorted[1]) then
      local merged = cz_merge_tail(dir, sorted)
      if merged then return merged end
      local j = i
      while j + 2 <= #sorted and not cz_before(ts, tid, tonumber(sorted[j + 3]), sorted[j + 2]) do
        j = j + 2
      end
      added = cz_add_spread(dir, sorted, i, j)
      i = j + 2
      if i > #sorted then return added end
      -- A split may have moved the last member to a new chunk.
      local _, n2 = cz_parse(redis.call('ZRANGE', dir, -1, -1)[1])
      ck = cz_chunk(dir, n2)
    end
    card = redis.call('ZCARD', ck)
  end
  local appended = cz_fill(dir, ck, card, sorted, i)
  cz_count(dir, appended)
  return added + appended
end

-- Add many members at once: flat {score, id, score, id, ...} (scores as
-- strings; rank as in cz_sorted).  Returns the number of new members and the
-- sorted {id, score, ...} list.
local function cz_add_many(dir, flat, rank)
  if #flat == 0 then return 0, {} end
  local sorted = cz_sorted(flat, rank)
  return cz_add_sorted(dir, sorted), sorted
end

-- Add rows to several chunked sets at once: sets[dir] = {score, id, ...} for
-- each dir of order, sets[K_ALL] holding every row.  The rows are sorted once,
-- for the all-jobs set (by Redis; not at all when in_order, or when they come
-- in order); an index set that got every row (one name, one queue: the usual
-- batch) takes that order as it is, one that got some ranks them by it.
local function cz_add_rows(sets, order, in_order)
  local every, sorted, rank, _ = sets[K_ALL], nil, nil, nil
  if every then
    if not in_order then
      -- They may come in order all the same.
      in_order = true
      for i = 3, #every, 2 do
        if not cz_before(tonumber(every[i - 2]), every[i - 1], tonumber(every[i]), every[i + 1]) then
          in_order = false
          break
        end
      end
    end
    if in_order then
      sorted = cz_zadd_args(every)
      cz_add_sorted(K_ALL, sorted)
    else
      _, sorted = cz_add_many(K_ALL, every)
    end
  end
  for _, dir in ipairs(order) do
    local z = sets[dir]
    if dir == K_ALL then
      -- done above
    elseif every and #z == #every then
      cz_add_sorted(dir, sorted)
    elseif in_order then
      cz_add_sorted(dir, cz_zadd_args(z))
    else
      if not rank then
        rank = {}
        for i = 1, #sorted, 2 do rank[sorted[i]] = i end
      end
      cz_add_many(dir, z, rank)
    end
  end
end

-- Move the head's rows into the chunks (once per call: later calls return at
-- once).  The head is deleted before anything is added: on a full server
-- (noeviction) a script's first write must not grow memory.
cz_fold = function()
  if CZ_FOLDED then return end
  CZ_FOLDED = true
  local rows = redis.call('LRANGE', K_IXPEND, 0, -1)
  if #rows == 0 then return end
  redis.call('DEL', K_IXPEND)
  -- A row: score, id, flags, queue, name.  flags: the index flags ('11': name and
  -- queue indexes on), then 'a' for a store-assigned id ('j-' and its seq).
  -- Whether the rows came in the sets' order is told on the way: for two
  -- store-assigned ids of one length the seqs compare as the bytes do.
  -- (Lengths are counted, not taken with #: a table's # is a search.)
  local sets, lens, order, names, queues, kinds = {}, {}, {}, {}, {}, {}
  local function put(dir, s, id)
    local z, n = sets[dir], lens[dir]
    if not z then
      z, n = {}, 0
      sets[dir] = z
      order[#order + 1] = dir
    end
    z[n + 1], z[n + 2] = s, id
    lens[dir] = n + 2
  end
  local asc, ps, pid, pnum = true, nil, nil, nil
  for i = 1, #rows - (CZ_HEAD_ROW_ITEMS - 1), CZ_HEAD_ROW_ITEMS do
    local s, id, flags = rows[i], rows[i + 1], rows[i + 2]
    local kind = kinds[flags]
    if not kind then
      kind = { string.byte(flags, 1) == 49, string.byte(flags, 2) == 49, string.byte(flags, 3) == 97 }
      kinds[flags] = kind
    end
    local num = kind[3] and tonumber(string.sub(id, 3)) or nil
    if asc and ps then
      if s ~= ps then
        local sn, psn = tonumber(s), tonumber(ps)
        if sn < psn then
          asc = false
        elseif sn == psn then
          asc = cz_lt(pid, id)
        end
      elseif num and pnum and #id == #pid then
        asc = num > pnum
      else
        asc = cz_lt(pid, id)
      end
    end
    ps, pid, pnum = s, id, num
    put(K_ALL, s, id)
    -- Each name's and queue's key is built once per fold.
    local name, queue = rows[i + 4], rows[i + 3]
    if kind[1] then
      names[name] = names[name] or k_byname(name)
      put(names[name], s, id)
    end
    if kind[2] then
      queues[queue] = queues[queue] or k_byqueue(queue)
      put(queues[queue], s, id)
    end
  end
  cz_add_rows(sets, order, asc)
end

-- A chunk's lower bound is its first member: when that member leaves, the
-- bound moves up to the new first one (it stays above the previous chunk's
-- members), so the directory never names a job that is gone.  Returns the
-- directory member now naming the chunk.
local function cz_rebound(dir, m, ck, id)
  local bound, n = cz_parse(m)
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
    local _, n2 = cz_parse(nxt)
    local ck2 = cz_chunk(dir, n2)
    if card + redis.call('ZCARD', ck2) <= CZ_CAP then
      cz_move(ck2, ck)
      redis.call('ZREM', dir, nxt)
      return
    end
  end
  if rank > 0 then
    local prv = redis.call('ZRANGE', dir, rank - 1, rank - 1)[1]
    local _, n0 = cz_parse(prv)
    local ck0 = cz_chunk(dir, n0)
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
local function cz_rem(dir, s, id)
  local m, rank
  if s then
    s = tostring(s)
    m, rank = cz_locate(dir, tonumber(s), s, id)
  end
  if not m then
    redis.call('ZREM', dir, id) -- a directory member is never a bare id: a no-op
    return 0
  end
  local _, n = cz_parse(m)
  local ck = cz_chunk(dir, n)
  if redis.call('ZREM', ck, id) == 0 then return 0 end
  cz_count(dir, -1)
  cz_settle(dir, m, ck, rank, id)
  return 1
end

-- Drop a member met in chunk ck of dir (a listing's or a check's heal): no
-- merge, so a reader walking the chunks by rank keeps its place; an emptied
-- chunk's directory entry goes.  Returns true when the directory entry went.
local function cz_drop(dir, ck, id)
  local score = redis.call('ZSCORE', ck, id)
  if not score then return false end
  local m = cz_locate(dir, tonumber(score), score, id)
  redis.call('ZREM', ck, id)
  cz_count(dir, -1)
  if not (m and cz_chunk(dir, select(2, cz_parse(m))) == ck) then return false end
  if redis.call('EXISTS', ck) == 1 then
    cz_rebound(dir, m, ck, id)
    return false
  end
  redis.call('ZREM', dir, m)
  return true
end

-- Whether id, scored s, is in the chunked set dir.
local function cz_has(dir, s, id)
  if not s then return false end
  s = tostring(s)
  local m = cz_locate(dir, tonumber(s), s, id)
  if not m then return false end
  local _, n = cz_parse(m)
  return redis.call('ZSCORE', cz_chunk(dir, n), id) ~= false
end
