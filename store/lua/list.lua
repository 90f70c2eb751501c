-- list: one page of jobs from 1-3 sorted sources, keyset-paged, with residual filters.
--
-- KEYS[1]  the store's hash tag
-- ARGV[1]  order 'desc' | 'asc'   ARGV[2]  page size   ARGV[3]  scan budget
-- ARGV[4]  '1' if a cursor follows  ARGV[5]  cursor order value  ARGV[6]  cursor id
-- ARGV[7]  residual queue ('' = none)   ARGV[8]  residual name ('' = none)
-- ARGV[9]  residual states, comma-joined ('' = any)
-- ARGV[10] number of sources n, ARGV[11..10+n] source zset keys (scored by the
--          order value, members are job ids), then m, then m metadata key/value pairs,
--          then the length of a prefix every member carries before its job id
--          (the waiting sets' 16-digit sequence; '' or absent = 0), then '1'
--          when the sources are chunked sets (lib/chunks.lua: the all-jobs
--          set and the list indexes, scored by enqueued_at), then a job id
--          prefix ('' or absent = none), then p, then p payload path/value
--          pairs (a path is dot-separated object keys and 0-based array
--          indexes; see payload_has)
--
-- Reply: {more, truncated, scanned, item_value, item_id, seen_value, seen_id,
--         id1, pairs1, id2, pairs2, ...}
-- more = '1' when another match exists after the page (item_* name the page's
-- last row); truncated = '1' when the scan budget ran out first (seen_* name
-- the last row examined, from where the caller continues).  Order is (score, id) with ids compared as
-- bytes, both descending or both ascending, exactly the zset's own order.
-- The body runs as a function of its own: its locals and the helpers' would
-- pass Lua's 200 locals of one function in a script (as a Function library
-- entry it is a function anyway).
return (function()
-- Rows single inserts left in the chunked sets' head join their chunks first.
cz_fold()
local desc = ARGV[1] == 'desc'
local limit = tonumber(ARGV[2])
local budget = tonumber(ARGV[3])
local has_cursor = ARGV[4] == '1'
local c_value, c_id = ARGV[5], ARGV[6]
local f_queue, f_name = ARGV[7], ARGV[8]
local f_states = nil
if ARGV[9] ~= '' then
  f_states = {}
  for s in string.gmatch(ARGV[9], '[^,]+') do f_states[s] = true end
end
local n = tonumber(ARGV[10])
local sources = {}
for i = 1, n do sources[i] = ARGV[10 + i] end
local m = tonumber(ARGV[11 + n])
local f_meta = {}
for i = 1, m do f_meta[ARGV[10 + n + 2 * i]] = ARGV[11 + n + 2 * i] end
local strip = tonumber(ARGV[12 + n + 2 * m] or '') or 0
local chunked = ARGV[13 + n + 2 * m] == '1'
local f_prefix = ARGV[14 + n + 2 * m] or ''
local p = tonumber(ARGV[15 + n + 2 * m] or '') or 0
local f_payload = {}
for i = 1, p do
  local at = 14 + n + 2 * m + 2 * i
  local path = {}
  for seg in string.gmatch(ARGV[at], '[^.]+') do path[#path + 1] = seg end
  f_payload[i] = { path = path, value = ARGV[at + 1] }
end

-- The text a JSON scalar is searched by: strings as they are, integers without
-- a fraction, other numbers with up to 14 significant digits, true/false/null.
local function scalar_text(v)
  local t = type(v)
  if t == 'string' then return v end
  if t == 'number' then
    if v == math.floor(v) and math.abs(v) < 1e15 then return string.format('%d', v) end
    return string.format('%.14g', v)
  end
  if t == 'boolean' then return v and 'true' or 'false' end
  if v == cjson.null then return 'null' end
  return nil
end

-- The decoded payload holds value at path: an object key, or a 0-based index
-- of an array; an array at the end of the path matches when one of its items does.
local function payload_has(doc, path, value)
  local v = doc
  for _, seg in ipairs(path) do
    if type(v) ~= 'table' then return false end
    local nxt = v[seg]
    if nxt == nil and string.match(seg, '^%d+$') then nxt = v[tonumber(seg) + 1] end
    if nxt == nil then return false end
    v = nxt
  end
  if type(v) == 'table' then
    for _, item in ipairs(v) do
      if scalar_text(item) == value then return true end
    end
    return false
  end
  return scalar_text(v) == value
end

-- before(a, b): a comes first in the requested order.
local function before(sa, ia, sb, ib)
  if sa ~= sb then
    if desc then return sa > sb end
    return sa < sb
  end
  if desc then return cz_lt(ib, ia) end
  return cz_lt(ia, ib)
end

local function fetch(key, from, to)
  if desc then return redis.call('ZREVRANGE', key, from, to, 'WITHSCORES') end
  return redis.call('ZRANGE', key, from, to, 'WITHSCORES')
end

-- The rank of the first member strictly after the cursor: skip the rows that
-- score ahead of the cursor value, then binary-search the tie group.
local function start_rank(key)
  if not has_cursor then return 0 end
  local ahead, ties
  if desc then
    ahead = redis.call('ZCOUNT', key, '(' .. c_value, '+inf')
  else
    ahead = redis.call('ZCOUNT', key, '-inf', '(' .. c_value)
  end
  ties = redis.call('ZCOUNT', key, c_value, c_value)
  local lo, hi = ahead, ahead + ties
  while lo < hi do
    local mid = math.floor((lo + hi) / 2)
    local member = fetch(key, mid, mid)[1]
    local after
    if desc then after = cz_lt(member, c_id) else after = cz_lt(c_id, member) end
    if after then hi = mid else lo = mid + 1 end
  end
  return lo
end

-- The counter a dangling member of a source held: delayed:<queue> names its
-- queue; finished:<state> is store-wide (the queue comes from orphan_queue).
local DELAYED_PREFIX, FINISHED_PREFIX = k_delayed(''), k_finished('')
local function uncount_source(key, id)
  if string.sub(key, 1, #DELAYED_PREFIX) == DELAYED_PREFIX then
    uncount(string.sub(key, #DELAYED_PREFIX + 1), 'delayed')
  elseif string.sub(key, 1, #FINISHED_PREFIX) == FINISHED_PREFIX then
    local state = string.sub(key, #FINISHED_PREFIX + 1)
    local queue = is_terminal(state) and orphan_queue(id, state)
    if queue then uncount(queue, state) end
  end
end

local PAGE = 100

-- A head reads one source in the requested order: peek() the next member,
-- pop() it, heal() to drop the member just popped (its row is gone).
local function zset_head(key)
  local h = { key = key, rank = start_rank(key), buf = {}, pos = 1 }
  function h.peek()
    if h.pos > #h.buf then
      if h.done then return nil end
      h.buf = fetch(h.key, h.rank, h.rank + PAGE - 1)
      h.pos = 1
      if #h.buf < PAGE * 2 then h.done = true end
      if #h.buf == 0 then return nil end
    end
    return h.buf[h.pos], tonumber(h.buf[h.pos + 1]), h.buf[h.pos + 1]
  end
  function h.pop()
    h.pos = h.pos + 2
    h.rank = h.rank + 1
  end
  function h.heal(member)
    -- Ranks after it shift down.
    if redis.call('ZREM', h.key, member) == 1 then uncount_source(h.key, member) end
    h.rank = h.rank - 1
  end
  return h
end

-- A chunked set is read a chunk at a time, by directory rank.  The first
-- chunk read after a cursor starts past it.
local function chunk_head(dir)
  local h = { key = dir, buf = {}, pos = 1, ck = dir, loaded = false, gone = false }
  local first = nil
  if has_cursor then
    local member, rank = cz_locate(dir, tonumber(c_value), c_value, c_id)
    if member then
      h.rank = rank or redis.call('ZRANK', dir, member)
      first = h.rank
    elseif desc then
      h.done = true -- nothing sorts before the cursor
    else
      h.rank = 0
    end
  elseif desc then
    h.rank = redis.call('ZCARD', dir) - 1
  else
    h.rank = 0
  end
  local function load()
    while not h.done do
      if h.rank < 0 then
        h.done = true
        break
      end
      local entry = redis.call('ZRANGE', dir, h.rank, h.rank)[1]
      if not entry then
        h.done = true
        break
      end
      local _, cn = cz_parse(entry)
      local ck = cz_chunk(dir, cn)
      local flat = desc and redis.call('ZREVRANGE', ck, 0, -1, 'WITHSCORES')
        or redis.call('ZRANGE', ck, 0, -1, 'WITHSCORES')
      local start = 1
      if first == h.rank then
        -- Skip what does not come strictly after the cursor.
        local cv = tonumber(c_value)
        while start <= #flat and not before(cv, c_id, tonumber(flat[start + 1]), flat[start]) do
          start = start + 2
        end
      end
      h.entry, h.ck, h.buf, h.pos, h.gone, h.loaded = entry, ck, flat, start, false, true
      if #flat == 0 then
        -- A directory entry without its chunk (the key was lost): heal it.
        redis.call('ZREM', dir, entry)
        if desc then h.rank = h.rank - 1 end
      elseif start > #flat then
        h.rank = desc and h.rank - 1 or h.rank + 1
      else
        return true
      end
    end
    return false
  end
  function h.peek()
    if h.pos > #h.buf then
      if h.loaded then
        -- Next chunk: an ascending walk stays on this rank when the entry went.
        if desc then h.rank = h.rank - 1 elseif not h.gone then h.rank = h.rank + 1 end
        h.loaded = false
      end
      if not load() then return nil end
    end
    return h.buf[h.pos], tonumber(h.buf[h.pos + 1]), h.buf[h.pos + 1]
  end
  function h.pop()
    h.pos = h.pos + 2
  end
  function h.heal(member)
    if cz_drop(dir, h.ck, member) then h.gone = true end
  end
  return h
end

local heads = {}
for i, key in ipairs(sources) do
  heads[i] = chunked and chunk_head(key) or zset_head(key)
end

-- nil: the member is an orphan (its row is gone, or, in a chunked set scored
-- by enqueued_at, it is a stale entry under another score).
local function matches(jk, score)
  local f = redis.call('HMGET', jk, 'queue', 'name', 'state', 'metadata', 'enqueued_at')
  if not f[1] then return nil end
  if chunked and f[5] and tonumber(f[5]) ~= score then return nil end
  if f_queue ~= '' and f[1] ~= f_queue then return false end
  if f_name ~= '' and f[2] ~= f_name then return false end
  if f_states and not f_states[f[3] or 'waiting'] then return false end
  if m > 0 then
    local ok, meta = pcall(cjson.decode, get_long(jk, 'metadata', f[4]) or '{}')
    if not ok or type(meta) ~= 'table' then return false end
    for k, v in pairs(f_meta) do
      if meta[k] ~= v then return false end
    end
  end
  if p > 0 then
    local raw = get_long(jk, 'payload', redis.call('HGET', jk, 'payload'))
    local ok, doc = pcall(cjson.decode, raw or '')
    if not ok then return false end
    for _, pred in ipairs(f_payload) do
      if not payload_has(doc, pred.path, pred.value) then return false end
    end
  end
  return true
end

local out = { '0', '0', 0, '', '', '', '' }
local found, scanned = 0, 0
while true do
  local best, best_id, best_score, best_raw = nil, nil, nil, nil
  for i, h in ipairs(heads) do
    local id, score, raw = h.peek()
    if id and (best == nil or before(score, id, best_score, best_id)) then
      best, best_id, best_score, best_raw = i, id, score, raw
    end
  end
  if not best then break end
  if scanned >= budget then
    out[2] = '1'
    break
  end
  local h = heads[best]
  h.pop()
  scanned = scanned + 1
  local job_id = best_id
  if strip > 0 then job_id = string.sub(best_id, strip + 1) end
  local jk = k_job(job_id)
  local ok = false
  -- An id prefix is checked before the row is read (no read, no heal, for the rest).
  if f_prefix == '' or string.sub(job_id, 1, #f_prefix) == f_prefix then
    ok = matches(jk, best_score)
  end
  if ok == nil then
    -- An orphan: heal this source and, for a state set, take back the counter
    -- the job held.
    h.heal(best_id)
  elseif ok then
    if found == limit then
      out[1] = '1'
      break
    end
    found = found + 1
    out[#out + 1] = job_id
    out[#out + 1] = redis.call('HGETALL', jk)
    out[4], out[5] = best_raw, best_id
  end
  out[6], out[7] = best_raw, best_id
end
out[3] = scanned
return out
end)()
