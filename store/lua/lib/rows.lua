-- Job rows: insert, delete, the per-(queue, name) waiting zsets, counters.
--
-- A job hash stores only fields that carry a value: absent optionals are absent
-- fields (HGET -> false), which keeps rows small.  JSON fields are stored
-- verbatim as the client encoded them and are never decoded here.

-- A number as an integer string.  The texts of recent numbers are kept (a
-- call formats its time, and each claim its lock expiry, again and again;
-- string.format is among the dearest things a script does): at most
-- FMT.max of them, then the table starts over.
local FMT = { texts = {}, n = 0, max = 256 }
local function fmt(n)
  local s = FMT.texts[n]
  if s then return s end
  s = string.format('%.0f', n)
  -- NaN is no table key; 0 and -0 are one key but two texts, so neither is kept.
  if n ~= n or n == 0 then return s end
  if FMT.n >= FMT.max then FMT.texts, FMT.n = {}, 0 end
  FMT.texts[n], FMT.n = s, FMT.n + 1
  return s
end

-- Long values.  A hash whose values are all at most hash-max-listpack-value
-- bytes (64 by default) and that has at most hash-max-listpack-entries fields
-- (128) stays a listpack, several times smaller than a hash table.  A job
-- field whose value is longer than 63 bytes (payload, exit, metadata, ...) is
-- stored in pieces of at most 63 (a listpack string of 64 bytes or more takes
-- a longer header): the field itself holds the first piece, '<C>2', '<C>3',
-- ... the rest, <C> the field's one-letter PIECE_CODE (no other job field
-- starts with a capital).  Pieces are cut at UTF-8 character boundaries
-- (every client decodes each value on its own), so every piece but the last
-- is 60..63 bytes and a piece shorter than 60 bytes is the last.  Whoever
-- rewrites or deletes such a field removes its old pieces in the same call.
-- A value of layout 1 (one field, any length) reads the same way.  Mirrors
-- store/codec.py (LONG_FIELDS).
local PIECE, PIECE_MIN = 63, 60
local PIECE_CODE = {
  payload = 'P', metadata = 'M', exit = 'E', failed_reason = 'R', backoff = 'B',
  keep = 'K', trace = 'T', parent = 'A', dedupe_key = 'D', progress = 'G',
}

-- Append field = value (in pieces when long) to the HSET argument array h,
-- whose last used index is n; returns the new last index.
local function put_long(h, n, field, value)
  local len = #value
  if len <= PIECE then
    h[n + 1], h[n + 2] = field, value
    return n + 2
  end
  local at, k = 1, 1
  while at <= len do
    local stop = at + PIECE - 1
    if stop < len then
      -- Back off (at most 3 bytes) while the cut would split a UTF-8 sequence.
      local floor = stop - 3
      while stop > floor do
        local b = string.byte(value, stop + 1)
        if b < 128 or b >= 192 then break end
        stop = stop - 1
      end
    end
    h[n + 1] = k == 1 and field or (PIECE_CODE[field] .. k)
    h[n + 2] = string.sub(value, at, stop)
    n, at, k = n + 2, stop + 1, k + 1
  end
  return n
end

-- The whole value of field, given its first piece (as HGET / HMGET read it).
local function get_long(key, field, first)
  if not first or #first < PIECE_MIN then return first end
  local parts, k = { first }, 2
  while true do
    local piece = redis.call('HGET', key, PIECE_CODE[field] .. k)
    if not piece then break end
    parts[k] = piece
    if #piece < PIECE_MIN then break end
    k = k + 1
  end
  return table.concat(parts)
end

-- Remove the pieces after the first of field (the field itself stays).
local function drop_pieces(key, field)
  local k = 2
  local code = PIECE_CODE[field]
  while redis.call('HDEL', key, code .. k) == 1 do k = k + 1 end
end

-- HSET field = value (in pieces when long), replacing any earlier value.
local function set_long(key, field, value)
  drop_pieces(key, field)
  local h = {}
  call_runs('HSET', key, h, 1, put_long(h, 0, field, value), 2)
end

-- HDEL field and its pieces.
local function del_long(key, field)
  if redis.call('HDEL', key, field) == 1 then drop_pieces(key, field) end
end

local function is_terminal(state)
  return state == 'completed' or state == 'failed' or state == 'cancelled'
end

-- Summed over the call (lib/tally.lua): a batch moves the same fields per job.
local function counts_add(queue, state, n)
  TALLY.count(queue, state, n)
end

-- Waiting members sort by score (-priority), then by bytes of the member: a
-- zero-padded FIFO ordinal followed by the id.  seq is a number or its decimal
-- string (as stored in the job hash); ordinals stay below 10^15.
local function waiting_member(seq, id)
  if type(seq) ~= 'string' then seq = fmt(seq) end
  return string.sub(WAITING_SEQ_ZEROS, #seq + 1) .. seq .. id
end

-- group: the job's group (nil or '': none); a grouped job waits in its
-- group's sets instead (lib/limits.lua).
local function add_waiting(queue, name, priority, seq, id, group)
  local score, member = -(tonumber(priority) or 0), waiting_member(seq, id)
  if group and group ~= '' then return LIMITS.group_add(queue, name, group, score, member) end
  redis.call('ZADD', k_waiting(queue, name), score, member)
end

local function rem_waiting(queue, name, seq, id, group)
  if group and group ~= '' then return LIMITS.group_rem(queue, name, group, waiting_member(seq, id)) end
  redis.call('ZREM', k_waiting(queue, name), waiting_member(seq, id))
end

local function wake(queue)
  redis.call('PUBLISH', K_WAKE, queue)
end

-- Request layout shared by enqueue, enqueue_many and tick_schedule: 6 ARGV
-- strings starting at index i: mode, id, name, queue, payload, options.
-- options is '' when every option is at its default (the common case: no
-- parsing, no per-field checks), else the 10 fields of OPTION_FIELDS joined
-- by NUL (none of them can hold a raw NUL: JSON escapes it, numbers have none).
local REQUEST_WIDTH = 6
local OPTION_FIELDS = {
  'metadata', 'priority', 'attempts_max', 'backoff', 'keep', 'timeout_ms', 'trace', 'parent', 'delay',
  'group',
}
local PLAIN_REQUEST = { __index = {
  metadata = '{}', priority = '0', attempts_max = '1', backoff = '', keep = '',
  timeout_ms = '', trace = '', parent = '', delay = 0, group = '',
} }
-- into: optionally, the table an earlier call returned for a plain request; a
-- plain request is read into it again instead of a fresh table (a chunk reads
-- up to 500 requests, nearly always plain, and keeps none of them).
local function read_request(i, into)
  local opts = ARGV[i + 5]
  local r = into
  if opts ~= '' or not r or r.opts then
    r = {}
    if opts == '' then setmetatable(r, PLAIN_REQUEST) end
  end
  r.mode, r.id, r.name, r.queue, r.payload = ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3], ARGV[i + 4]
  if opts == '' then return r end
  r.opts = true
  local k = 0
  for v in string.gmatch(opts .. NUL, '(%Z*)%z') do
    k = k + 1
    r[OPTION_FIELDS[k]] = v
  end
  r.delay = tonumber(r.delay) or 0
  -- Requests encoded before job groups (stored schedules) have 9 fields.
  r.group = r.group or ''
  return r
end

-- Insert bookkeeping is accumulated and flushed once per script call, so a
-- chunk of 500 inserts issues one ZADD per sorted set and one HINCRBY per
-- counter instead of one per job.
local function new_acc()
  return { zsets = {}, order = {}, cz = {}, cz_order = {}, counts = {}, qnames = {}, woken = {}, routes = {} }
end

-- Append the pair (a, b) to lists[key], a list made on first use, its key
-- remembered in order: the accumulators that write one command per key at
-- the end (a chunk of inserts, a batch of acks).
local function push_keyed(lists, order, key, a, b)
  local z = lists[key]
  if not z then
    z = {}
    lists[key] = z
    order[#order + 1] = key
  end
  z[#z + 1] = a
  z[#z + 1] = b
end

local function flush_acc(acc)
  -- acc.in_order: the caller knows the rows came in the sets' order (see
  -- enqueue_many), so no set needs sorting.
  cz_add_rows(acc.cz, acc.cz_order, acc.in_order)
  for _, key in ipairs(acc.order) do
    local z = acc.zsets[key]
    call_runs('ZADD', key, z, 1, #z, 2)
  end
  for field, n in pairs(acc.counts) do
    redis.call('HINCRBY', K_COUNTS, field, n)
  end
  for member in pairs(acc.qnames) do
    redis.call('SADD', K_QNAMES, member)
  end
  for queue in pairs(acc.woken) do
    wake(queue)
  end
end

-- Store-assigned ids are "j-<seq>".  When a user inserts an id of that shape,
-- the counter is raised past it, so a store-assigned id can never name an
-- existing job and no existence probe is needed (ids beyond 15 digits cannot
-- be reached by the counter and are left alone).
local function reserve_user_id(id)
  local digits = string.match(id, '^j%-(%d+)$')
  if digits and #digits <= 15 then
    local n = tonumber(digits)
    if n > (tonumber(redis.call('GET', K_SEQ)) or 0) then redis.call('SET', K_SEQ, fmt(n)) end
  end
end

-- Draw a store-assigned id: returns id, seq (the seq, as a decimal string,
-- doubles as the FIFO ordinal).
local function draw_auto_id()
  local seq = fmt(redis.call('INCR', K_SEQ))
  return 'j-' .. seq, seq
end

-- The keys and counter fields one (queue, name) pair writes on insert,
-- built once per call for a chunk (acc.routes) and per insert otherwise.
local function insert_route(queue, name)
  return {
    byname = k_byname(name), byqueue = k_byqueue(queue),
    waiting = k_waiting(queue, name), delayed = k_delayed(queue),
    waiting_field = queue .. '|waiting', delayed_field = queue .. '|delayed',
    qname = queue .. NUL .. name,
  }
end

-- Insert a fresh row: its hash now; its index entries and counters through
-- acc (flushed once per call by flush_acc), or written at once when acc is
-- nil (a single insert: no accumulator to build).  idx is the two-character
-- index flag string ("11": name and queue indexes on).  Returns the new state.
local function insert_job(id, r, dedupe_key, now, idx, seq, acc)
  seq = seq or redis.call('INCR', K_SEQ)
  if type(seq) ~= 'string' then seq = fmt(seq) end
  local now_s
  if acc then
    now_s = acc.now_s
    if not now_s then
      now_s = fmt(now)
      acc.now_s = now_s
    end
  else
    now_s = fmt(now)
  end
  local state, run_at_s = 'waiting', now_s
  local h = { 'name', r.name, 'queue', r.queue, 'state', state, 'enqueued_at', now_s, 'seq', seq }
  local n = 10
  -- run_at is absent while it equals enqueued_at (readers fall back to it).
  if r.delay > 0 then
    state, run_at_s = 'delayed', fmt(now + r.delay)
    h[6], h[11], h[12], n = state, 'run_at', run_at_s, 12
  end
  n = put_long(h, n, 'payload', r.payload)
  if r.opts then
    -- Optional fields only when they carry a value (absent = default).
    if r.metadata ~= '' and r.metadata ~= '{}' then n = put_long(h, n, 'metadata', r.metadata) end
    if r.priority ~= '' and r.priority ~= '0' then h[n + 1], h[n + 2], n = 'priority', r.priority, n + 2 end
    if r.attempts_max ~= '' and r.attempts_max ~= '1' then
      h[n + 1], h[n + 2], n = 'attempts_max', r.attempts_max, n + 2
    end
    if r.backoff ~= '' then n = put_long(h, n, 'backoff', r.backoff) end
    if r.keep ~= '' then n = put_long(h, n, 'keep', r.keep) end
    if r.timeout_ms ~= '' then h[n + 1], h[n + 2], n = 'timeout_ms', r.timeout_ms, n + 2 end
    if r.trace ~= '' then n = put_long(h, n, 'trace', r.trace) end
    if r.parent ~= '' then n = put_long(h, n, 'parent', r.parent) end
    if r.group ~= '' then h[n + 1], h[n + 2], n = 'group', r.group, n + 2 end
  end
  if dedupe_key ~= '' then n = put_long(h, n, 'dedupe_key', dedupe_key) end
  call_runs('HSET', k_job(id), h, 1, n, 2)
  if r.mode == 'user' then reserve_user_id(id) end
  EVENTS.emit(state == 'delayed' and 'delayed' or 'enqueued', id, r.name, r.queue, 0, now, nil)
  local queue, name = r.queue, r.name
  local rt
  if acc then
    local key = queue .. NUL .. name
    rt = acc.routes[key]
    if not rt then
      rt = insert_route(queue, name)
      acc.routes[key] = rt
    end
  else
    rt = insert_route(queue, name)
  end
  local score, member, wkey, field
  -- A grouped job waits in its group's sets, written at once (lib/limits.lua).
  local grouped = state == 'waiting' and r.group ~= ''
  if grouped then
    LIMITS.group_add(queue, name, r.group, -(tonumber(r.priority) or 0), waiting_member(seq, id))
    field = rt.waiting_field
  elseif state == 'waiting' then
    wkey, score, member, field = rt.waiting, -(tonumber(r.priority) or 0), waiting_member(seq, id), rt.waiting_field
  else
    wkey, score, member, field = rt.delayed, run_at_s, id, rt.delayed_field
  end
  if not acc then
    -- The chunked sets' row goes to their head (lib/chunks.lua): score, id,
    -- index flags and 'a' for a store-assigned id, queue, name.  The row that
    -- makes CZ_HEAD_ROWS folds it; a later read in this call folds it again.
    local flags = r.mode == 'auto' and string.sub(idx, 1, 2) .. 'a' or string.sub(idx, 1, 2)
    local len = redis.call('RPUSH', K_IXPEND, now_s, id, flags, queue, name)
    CZ_FOLDED = false
    if len >= CZ_HEAD_ROWS * CZ_HEAD_ROW_ITEMS then cz_fold() end
    if not grouped then redis.call('ZADD', wkey, score, member) end
    redis.call('HINCRBY', K_COUNTS, field, 1)
    -- Which job names each queue has seen (the dashboard's filters, oldest-waiting lookups).
    redis.call('SADD', K_QNAMES, rt.qname)
    wake(queue)
    return state
  end
  push_keyed(acc.cz, acc.cz_order, K_ALL, now_s, id)
  if string.byte(idx, 1) == 49 then push_keyed(acc.cz, acc.cz_order, rt.byname, now_s, id) end
  if string.byte(idx, 2) == 49 then push_keyed(acc.cz, acc.cz_order, rt.byqueue, now_s, id) end
  if not grouped then push_keyed(acc.zsets, acc.order, wkey, score, member) end
  acc.counts[field] = (acc.counts[field] or 0) + 1
  acc.qnames[rt.qname] = true
  acc.woken[queue] = true
  return state
end

-- Dangling members.  A job hash can vanish behind the store's back (deleted by
-- hand, evicted) or lose the fields that identify it, while its id stays in
-- the sorted sets.  is_row tells a usable row from such a remnant; a script
-- that meets a dangling member removes it, takes back the counter the job
-- contributed to, and goes on.  A counter is never taken below zero (a
-- member seen twice, or a counter mqcheck already repaired).
local function is_row(state, queue, name, seq)
  return state and queue and name and seq and true or false
end

local function uncount(queue, state)
  local field = queue .. '|' .. state
  -- The counter as it stands in this call: stored plus what the call tallied.
  if (tonumber(redis.call('HGET', K_COUNTS, field)) or 0) + TALLY.pending(queue, state) > 0 then
    TALLY.count(queue, state, -1)
    return field
  end
  return nil
end

-- The queue of a dangling member of a store-wide set (active, finished:*),
-- where the key does not say it: the remnant's own queue field; else, by
-- the remnant's enqueued_at, the queue index that still lists the id; else
-- the store's only queue; else, for a terminal state, the one queue whose
-- job name still has the id in its terminal set.  At most ORPHAN_QUEUES
-- queue/name pairs are looked at.  nil when it cannot be told (mqcheck
-- recounts then).
local ORPHAN_QUEUES = 1000
local function orphan_queue(id, state)
  local f = redis.call('HMGET', k_job(id), 'queue', 'enqueued_at')
  if f[1] then return f[1] end
  if redis.call('SCARD', K_QNAMES) > ORPHAN_QUEUES then return nil end
  local queues, names, nq = {}, {}, 0
  for _, qname in ipairs(redis.call('SMEMBERS', K_QNAMES)) do
    local at = string.find(qname, NUL, 1, true)
    local q = at and string.sub(qname, 1, at - 1) or qname
    local n = at and string.sub(qname, at + 1) or ''
    if not queues[q] then
      queues[q], nq = true, nq + 1
      if f[2] and cz_has(k_byqueue(q), f[2], id) then return q end
    end
    local qs = names[n]
    if not qs then
      qs = {}
      names[n] = qs
    end
    qs[#qs + 1] = q
  end
  if nq == 1 then return next(queues) end
  if not (state and is_terminal(state)) then return nil end
  local found
  for n, qs in pairs(names) do
    if redis.call('ZSCORE', k_terminal(n, state), id) then
      if #qs > 1 or (found and found ~= qs[1]) then return nil end
      found = qs[1]
    end
  end
  return found
end

-- Drop a dangling member of the active set, with its counter.
local function drop_active_orphan(id)
  if redis.call('ZREM', K_ACTIVE, id) == 1 then
    local queue = orphan_queue(id, 'active')
    if queue then uncount(queue, 'active') end
  end
end
