-- list: one page of jobs from 1-3 sorted sources, keyset-paged, with residual filters.
--
-- KEYS[1]  the store's hash tag
-- ARGV[1]  order 'desc' | 'asc'   ARGV[2]  page size   ARGV[3]  scan budget
-- ARGV[4]  '1' if a cursor follows  ARGV[5]  cursor order value  ARGV[6]  cursor id
-- ARGV[7]  residual queue ('' = none)   ARGV[8]  residual name ('' = none)
-- ARGV[9]  residual states, comma-joined ('' = any)
-- ARGV[10] number of sources n, ARGV[11..10+n] source zset keys (scored by the
--          order value, members are job ids), then m, then m metadata key/value pairs,
--          then optionally the length of a prefix every member carries before its
--          job id (the waiting sets' 16-digit sequence; '' or absent = 0)
--
-- Reply: {more, truncated, scanned, item_value, item_id, seen_value, seen_id,
--         id1, pairs1, id2, pairs2, ...}
-- more = '1' when another match exists after the page (item_* name the page's
-- last row); truncated = '1' when the scan budget ran out first (seen_* name
-- the last row examined, from where the caller continues).  Order is (score, id) with ids compared as
-- bytes, both descending or both ascending, exactly the zset's own order.
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

-- Byte-wise string order (Lua's own < follows the server's locale).
local function bytes_lt(a, b)
  local la, lb = #a, #b
  for i = 1, math.min(la, lb) do
    local x, y = string.byte(a, i), string.byte(b, i)
    if x ~= y then return x < y end
  end
  return la < lb
end

-- before(a, b): a comes first in the requested order.
local function before(sa, ia, sb, ib)
  if sa ~= sb then
    if desc then return sa > sb end
    return sa < sb
  end
  if desc then return bytes_lt(ib, ia) end
  return bytes_lt(ia, ib)
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
    if desc then after = bytes_lt(member, c_id) else after = bytes_lt(c_id, member) end
    if after then hi = mid else lo = mid + 1 end
  end
  return lo
end

local PAGE = 100
local heads = {}
for i, key in ipairs(sources) do
  heads[i] = { key = key, rank = start_rank(key), buf = {}, pos = 1 }
end

local function peek(h)
  if h.pos > #h.buf then
    if h.done then return nil end
    h.buf = fetch(h.key, h.rank, h.rank + PAGE - 1)
    h.pos = 1
    if #h.buf < PAGE * 2 then h.done = true end
    if #h.buf == 0 then return nil end
  end
  return h.buf[h.pos], tonumber(h.buf[h.pos + 1]), h.buf[h.pos + 1]
end

-- The counter a dangling member of a source held: delayed:<queue> names its
-- queue; finished:<state> is store-wide (the queue comes from orphan_queue).
local DELAYED_PREFIX, FINISHED_PREFIX = B .. ':delayed:', B .. ':finished:'
local function uncount_source(key, id)
  if string.sub(key, 1, #DELAYED_PREFIX) == DELAYED_PREFIX then
    uncount(string.sub(key, #DELAYED_PREFIX + 1), 'delayed')
  elseif string.sub(key, 1, #FINISHED_PREFIX) == FINISHED_PREFIX then
    local state = string.sub(key, #FINISHED_PREFIX + 1)
    local queue = is_terminal(state) and orphan_queue(id)
    if queue then uncount(queue, state) end
  end
end

local function matches(jk)
  local f = redis.call('HMGET', jk, 'queue', 'name', 'state', 'metadata')
  if not f[1] then return nil end
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
  return true
end

local out = { '0', '0', 0, '', '', '', '' }
local found, scanned = 0, 0
while true do
  local best, best_id, best_score, best_raw = nil, nil, nil, nil
  for i, h in ipairs(heads) do
    local id, score, raw = peek(h)
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
  h.pos = h.pos + 2
  h.rank = h.rank + 1
  scanned = scanned + 1
  local job_id = best_id
  if strip > 0 then job_id = string.sub(best_id, strip + 1) end
  local jk = k_job(job_id)
  local ok = matches(jk)
  if ok == nil then
    -- An orphan: the row is gone.  Heal this source (ranks after it shift down)
    -- and, for a state set, take back the counter the job held.
    if redis.call('ZREM', h.key, best_id) == 1 then uncount_source(h.key, best_id) end
    h.rank = h.rank - 1
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
