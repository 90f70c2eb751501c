-- The store's event stream (read by RedisJobStore.events, store/events.py).
--
-- Every state transition adds an event, and the events a call made go to the
-- capped stream K_LIMIT.events as ONE entry when the call ends (EVENTS.flush,
-- run after every operation by the script wrapper in store/scripts.py), so a
-- reader sees the transitions of a job in the order they happened and never
-- one that did not happen, at the cost of one XADD per call whatever the
-- number of jobs it changed (a bulk enqueue, a batched ack and claim).
--
-- An entry has one field, 'e': the events, seven parts each, all parts
-- joined by NUL: type, job id, name, queue, attempt (the run number; 0 before
-- the first run), time (the caller's clock, ms), data (JSON or '').
-- Ids, names and queues never hold NUL (the store refuses them) and JSON text
-- never holds a raw one, so NUL separates the parts.
--
-- The cap is the store-wide setting K_LIMIT.evcap (absent: EVENTS.default
-- entries; 0: no events are written), read by the flush.  The stream is
-- trimmed approximately (MAXLEN ~): Redis drops whole nodes, so it holds the
-- cap plus at most one node of entries.
-- One table rather than locals: the joined library is near Lua's 200 locals.
local EVENTS = { default = 10000, buf = {}, n = 0 }

function EVENTS.emit(kind, id, name, queue, attempt, now, data)
  local buf, n = EVENTS.buf, EVENTS.n
  buf[n + 1], buf[n + 2], buf[n + 3], buf[n + 4] = kind, id, name, queue
  buf[n + 5], buf[n + 6], buf[n + 7] = attempt or 0, now, data or ''
  EVENTS.n = n + 7
end

-- Append the call's events as one entry (nothing when it made none).
function EVENTS.flush()
  local n = EVENTS.n
  if n == 0 then return end
  local buf = EVENTS.buf
  EVENTS.buf, EVENTS.n = {}, 0
  local cap = tonumber(redis.call('GET', K_LIMIT.evcap) or '') or EVENTS.default
  if cap <= 0 then return end
  redis.call('XADD', K_LIMIT.events, 'MAXLEN', '~', cap, '*', 'e', table.concat(buf, '\0', 1, n))
end
