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

-- The outbox invariant: a job carrying a parent envelope appends its terminal
-- report in the same atomic step as the transition.  Must run after the
-- terminal fields were written (it reads exit and failed_reason back).
local function append_outbox(id, state, now)
  local f = redis.call('HMGET', k_job(id), 'parent', 'exit', 'failed_reason')
  local parent = f[1]
  if not parent then return end
  local seq = redis.call('INCR', K_OUTBOX_SEQ)
  local doc = '{"parent":' .. parent .. ',"outcome":"' .. state .. '","at":' .. fmt(now)
  if f[2] then doc = doc .. ',"exit":' .. f[2] end
  if f[3] then doc = doc .. ',"failed_reason":' .. cjson.encode(f[3]) end
  redis.call('ZADD', K_OUTBOX, seq, fmt(seq) .. NUL .. doc .. '}')
end
