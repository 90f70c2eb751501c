-- The store's event stream (read by RedisJobStore.events, store/events.py).
--
-- Every state transition adds an event, and the events a call made go to the
-- capped stream K_LIMIT.events as ONE entry when the call ends (EVENTS.flush,
-- run after every operation by the script wrapper in store/scripts.py), so a
-- reader sees the transitions of a job in the order they happened and never
-- one that did not happen, at the cost of one XADD per call whatever the
-- number of jobs it changed (a bulk enqueue, a batched ack and claim).
--
-- An entry has one field, 'e': its events as records, all parts joined by
-- NUL.  A record is the six parts events share -- type, name, queue, attempt
-- (the run number; 0 before the first run), time (the caller's clock, ms),
-- data (JSON or '') -- then a count and that many job ids: consecutive events
-- that differ only in the job (a bulk enqueue) take one record.  Ids, names
-- and queues never hold NUL (the store refuses them) and JSON text never holds
-- a raw one, so NUL separates the parts.  Mirrors store/events.py.
--
-- The cap is the store-wide setting K_LIMIT.evcap (absent: EVENTS.default
-- entries; 0: no events are written), read by the flush.  The stream is
-- trimmed approximately (MAXLEN ~): Redis drops whole nodes, so it holds the
-- cap plus at most one node of entries.
-- One table rather than locals: the joined library is near Lua's 200 locals.
-- (buf: the parts so far, n: their number, head: the index of the last
-- record's count, 0 for none; now/now_s: the last time and its text.)
local EVENTS = { default = 10000, buf = {}, n = 0, head = 0 }

function EVENTS.emit(kind, id, name, queue, attempt, now, data)
  attempt, data = attempt or 0, data or ''
  if now ~= EVENTS.now then EVENTS.now, EVENTS.now_s = now, string.format('%.0f', now) end
  local buf, n, h = EVENTS.buf, EVENTS.n, EVENTS.head
  if h > 0 and buf[h - 6] == kind and buf[h - 5] == name and buf[h - 4] == queue
      and buf[h - 3] == attempt and buf[h - 2] == EVENTS.now_s and buf[h - 1] == data then
    buf[h] = buf[h] + 1
    buf[n + 1] = id
    EVENTS.n = n + 1
    return
  end
  buf[n + 1], buf[n + 2], buf[n + 3], buf[n + 4] = kind, name, queue, attempt
  buf[n + 5], buf[n + 6], buf[n + 7], buf[n + 8] = EVENTS.now_s, data, 1, id
  EVENTS.head, EVENTS.n = n + 7, n + 8
end

-- Forget the events collected (after a flush, or those of a call that failed
-- half-way: a Function library keeps its state between calls).  The buffer is
-- kept and overwritten (only buf[1..n] is read): no table per call.
function EVENTS.reset()
  EVENTS.n, EVENTS.head = 0, 0
end

-- Append the call's events as one entry (nothing when it made none).
function EVENTS.flush()
  local n = EVENTS.n
  if n == 0 then return end
  EVENTS.reset()
  local cap = tonumber(redis.call('GET', K_LIMIT.evcap) or '') or EVENTS.default
  if cap <= 0 then return end
  redis.call('XADD', K_LIMIT.events, 'MAXLEN', '~', cap, '*', 'e', table.concat(EVENTS.buf, '\0', 1, n))
end
