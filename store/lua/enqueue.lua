-- enqueue: insert one job, after the explicit-id check and the dedupe tree.
--
-- KEYS[1]  the store's hash tag "{<prefix>}"
-- ARGV[1]  now (ms)            ARGV[2]  index flags ("11" = name, queue on)
-- ARGV[3..8]  the request (see read_request): mode is 'user' (explicit id),
--          'generated' (id from the store's id generator) or 'auto' (j-<n>)
-- ARGV[9]  dedupe key ('' = none)   ARGV[10] dedupe ttl ms ('' = pending mode)
-- ARGV[11] extend '1'/'0'           ARGV[12] replace '1'/'0'
--
-- Reply: {'new', id} | {'dup', id} | {'replaced', id, queue} | {'collision'} |
-- {'needid'} (mode 'generated' with an empty id: the dedupe tree let
-- the request through, so the caller draws an id and calls again)
-- A new insert and a landed replace publish a wake for the job's queue.
local now = tonumber(ARGV[1])
local idx = ARGV[2]
local r = read_request(3, nil)
local dedupe_key = ARGV[9]
local ttl = tonumber(ARGV[10])
local extend = ARGV[11] == '1'
local replace = ARGV[12] == '1'

-- 1. An existing explicit id wins over everything, dedupe included.
if r.mode ~= 'auto' and r.id ~= '' and redis.call('EXISTS', k_job(r.id)) == 1 then
  if r.mode == 'user' then return { 'dup', r.id } end
  return { 'collision' }
end

-- 2. The dedupe decision tree.
local member
if dedupe_key ~= '' then
  member = dedupe_member(r.name, dedupe_key)
  local dk = k_dedupe(member)
  local e = redis.call('HMGET', dk, 'job_id', 'expires_at')
  local keyed, expires_at = e[1], tonumber(e[2])
  if keyed then
    local kk = k_job(keyed)
    local kf = redis.call('HMGET', kk, 'state', 'queue')
    local keyed_state, keyed_queue = kf[1], kf[2]
    if replace and keyed_state == 'delayed' and keyed_queue then
      -- Rewrite the still-delayed keyed job in place; id, queue, seq, ledger,
      -- enqueued_at, dedupe key and parent stay (the group is the new one's).
      local run_at = now + math.max(0, r.delay)
      -- Old pieces of the long fields go first (see put_long).
      for _, field in ipairs({ 'payload', 'metadata', 'backoff', 'keep', 'trace' }) do
        drop_pieces(kk, field)
      end
      local set = { 'run_at', fmt(run_at) }
      local n = put_long(set, 2, 'payload', r.payload)
      local del = {}
      local function put(field, value, default)
        if value == '' or value == default then
          del[#del + 1] = field
        else
          n = put_long(set, n, field, value)
        end
      end
      put('metadata', r.metadata, '{}')
      put('priority', r.priority, '0')
      put('attempts_max', r.attempts_max, '1')
      put('backoff', r.backoff)
      put('keep', r.keep)
      put('timeout_ms', r.timeout_ms)
      put('trace', r.trace)
      put('group', r.group)
      call_runs('HSET', kk, set, 1, n, 2)
      call_runs('HDEL', kk, del, 1, #del, 1)
      redis.call('ZADD', k_delayed(keyed_queue), run_at, keyed)
      if ttl then
        -- The entry is a window entry from now on (out of the pending index).
        redis.call('HSET', dk, 'expires_at', fmt(now + ttl))
        redis.call('ZREM', K_DEDUPE_PENDING, member)
        redis.call('ZADD', K_DEDUPE_WINDOWS, now + ttl, member)
      end
      wake(keyed_queue)
      return { 'replaced', keyed, keyed_queue }
    end
    if expires_at and now < expires_at then
      -- A live window throttles whatever happened to its job.
      if extend and ttl then
        redis.call('HSET', dk, 'expires_at', fmt(now + ttl))
        redis.call('ZADD', K_DEDUPE_WINDOWS, now + ttl, member)
      end
      return { 'dup', keyed }
    end
    if (not e[2]) and keyed_state and not is_terminal(keyed_state) then
      return { 'dup', keyed }
    end
    -- Otherwise the entry is dead and the new job takes the key over.
  end
end

-- 3. Resolve the id.
if r.mode == 'generated' and r.id == '' then return { 'needid' } end
local id, seq = r.id, nil
if r.mode == 'auto' then
  id, seq = draw_auto_id()
end

-- 4. Insert, register the key, wake the queue (delayed inserts too: idle
-- takers learn the new next_run_at).
insert_job(id, r, dedupe_key, now, idx, seq, nil)
if member then
  local window_end = nil
  if ttl then window_end = now + ttl end
  dedupe_register(member, id, window_end)
end
return { 'new', id }
