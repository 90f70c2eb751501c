-- Job rows: insert, delete, the per-(queue, name) waiting zsets, counters.
--
-- A job hash stores only fields that carry a value: absent optionals are absent
-- fields (HGET -> false), which keeps rows small.  JSON fields are stored
-- verbatim as the client encoded them and are never decoded here.

local function fmt(n) return string.format('%.0f', n) end

local function is_terminal(state)
  return state == 'completed' or state == 'failed' or state == 'cancelled'
end

local function counts_add(queue, state, n)
  redis.call('HINCRBY', K_COUNTS, queue .. '|' .. state, n)
end

-- Waiting members sort by score (-priority), then by bytes of the member: a
-- zero-padded FIFO ordinal followed by the id.
local function waiting_member(seq, id)
  return string.format('%016.0f', tonumber(seq)) .. id
end

local function add_waiting(queue, name, priority, seq, id)
  redis.call('ZADD', k_waiting(queue, name), -(tonumber(priority) or 0), waiting_member(seq, id))
end

local function rem_waiting(queue, name, seq, id)
  redis.call('ZREM', k_waiting(queue, name), waiting_member(seq, id))
end

local function wake(queue)
  redis.call('PUBLISH', K_WAKE, queue)
end

-- Request layout shared by enqueue, enqueue_many and tick_schedule: 14 ARGV
-- strings starting at index i (''= absent).
local REQUEST_WIDTH = 14
local function read_request(i)
  return {
    mode = ARGV[i], id = ARGV[i + 1], name = ARGV[i + 2], queue = ARGV[i + 3],
    payload = ARGV[i + 4], metadata = ARGV[i + 5], priority = ARGV[i + 6],
    attempts_max = ARGV[i + 7], backoff = ARGV[i + 8], keep = ARGV[i + 9],
    timeout_ms = ARGV[i + 10], trace = ARGV[i + 11], parent = ARGV[i + 12],
    delay = tonumber(ARGV[i + 13]) or 0,
  }
end

-- Draw a store-assigned id "j-<n>" from the FIFO counter, skipping ids a user
-- already took.  Returns id, seq (the seq doubles as the FIFO ordinal), or nil.
local function draw_auto_id()
  for _ = 1, 5 do
    local seq = redis.call('INCR', K_SEQ)
    local id = 'j-' .. fmt(seq)
    if redis.call('EXISTS', k_job(id)) == 0 then return id, seq end
  end
  return nil
end

-- Insert a fresh row.  idx is the two-character index flag string ("11":
-- name and queue indexes on).  Returns the new state.
local function insert_job(id, r, dedupe_key, now, idx, seq)
  seq = seq or redis.call('INCR', K_SEQ)
  local state, run_at = 'waiting', now
  if r.delay > 0 then
    state, run_at = 'delayed', now + r.delay
  end
  local h = {
    'name', r.name, 'queue', r.queue, 'state', state, 'payload', r.payload,
    'run_at', fmt(run_at), 'enqueued_at', fmt(now), 'seq', fmt(seq),
  }
  local n = #h
  local function opt(field, value, default)
    if value ~= '' and value ~= default then
      h[n + 1] = field; h[n + 2] = value; n = n + 2
    end
  end
  opt('metadata', r.metadata, '{}')
  opt('priority', r.priority, '0')
  opt('attempts_max', r.attempts_max, '1')
  opt('backoff', r.backoff)
  opt('keep', r.keep)
  opt('timeout_ms', r.timeout_ms)
  opt('trace', r.trace)
  opt('parent', r.parent)
  opt('dedupe_key', dedupe_key)
  redis.call('HSET', k_job(id), unpack(h))
  redis.call('ZADD', K_ALL, now, id)
  if string.sub(idx, 1, 1) == '1' then redis.call('ZADD', k_byname(r.name), now, id) end
  if string.sub(idx, 2, 2) == '1' then redis.call('ZADD', k_byqueue(r.queue), now, id) end
  if state == 'waiting' then
    add_waiting(r.queue, r.name, r.priority, seq, id)
  else
    redis.call('ZADD', k_delayed(r.queue), run_at, id)
  end
  counts_add(r.queue, state, 1)
  -- Which job names each queue has seen (the dashboard's filters, oldest-waiting lookups).
  redis.call('SADD', K_QNAMES, r.queue .. NUL .. r.name)
  return state
end
