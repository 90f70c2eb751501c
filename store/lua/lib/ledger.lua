-- The attempts ledger and the flow outbox.  Both documents are built by string
-- concatenation so the stored exit / envelope JSON is spliced in verbatim
-- (cjson would round numbers to 14 digits and turn [] into {}).

-- exit_json: raw JSON text, or nil when the run has no exit.
local function append_attempt(id, outcome, started_at, now, exit_json)
  local ak = k_attempts(id)
  local n = redis.call('LLEN', ak) + 1
  local doc = '{"attempt":' .. n .. ',"started_at":' .. (started_at or 'null')
    .. ',"finished_at":' .. fmt(now) .. ',"outcome":"' .. outcome .. '"'
  if exit_json then doc = doc .. ',"exit":' .. exit_json end
  redis.call('RPUSH', ak, doc .. '}')
end

-- A folded entry (layout 2): a terminal job whose hash has lf = '1' keeps
-- its last ledger entry implicit -- attempt = entries in the ledger + 1,
-- started_at = pa, finished_at = fa, outcome = state, exit = exit (see
-- finish in transitions.lua; store/redis_store.py get_attempts reads it
-- the same way).  Whatever changes those fields writes the entry out first.
local function unfold_attempt(id)
  local jk = k_job(id)
  local f = redis.call('HMGET', jk, 'lf', 'state', 'pa', 'fa', 'exit')
  if f[1] ~= '1' then return end
  append_attempt(id, f[2], f[3], tonumber(f[4]) or 0, get_long(jk, 'exit', f[5]))
  redis.call('HDEL', jk, 'lf')
end

-- The outbox invariant: a job carrying a parent envelope appends its terminal
-- report in the same atomic step as the transition.  Must run after the
-- terminal fields were written (it reads exit and failed_reason back).
local function append_outbox(id, state, now)
  local jk = k_job(id)
  local f = redis.call('HMGET', jk, 'parent', 'exit', 'failed_reason')
  local parent = get_long(jk, 'parent', f[1])
  if not parent then return end
  local exit_json, reason = get_long(jk, 'exit', f[2]), get_long(jk, 'failed_reason', f[3])
  local seq = redis.call('INCR', K_OUTBOX_SEQ)
  local doc = '{"parent":' .. parent .. ',"outcome":"' .. state .. '","at":' .. fmt(now)
  if exit_json then doc = doc .. ',"exit":' .. exit_json end
  if reason then doc = doc .. ',"failed_reason":' .. cjson.encode(reason) end
  redis.call('ZADD', K_OUTBOX, seq, fmt(seq) .. NUL .. doc .. '}')
end
