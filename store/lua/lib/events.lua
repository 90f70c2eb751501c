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
-- cap plus at most one node of entries.  Run as a Function library (which
-- keeps this table between calls) the flush reads the cap and trims on every
-- trim_every-th entry of a stream only (see EVENTS.flush).
-- One table rather than locals: the joined library is near Lua's 200 locals.
-- (buf: the parts so far, n: their number, head: the index of the last
-- record's count, 0 for none; now/now_s: the last time and its text;
-- untrimmed: per stream key, the entries appended since its last trim, and
-- streams: how many keys it holds.)
local EVENTS = {
  default = 10000, buf = {}, n = 0, head = 0, trim_every = 16, untrimmed = {}, streams = 0,
}

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

-- Append the call's events as one entry (nothing when it made none).  kept:
-- this table outlives the call (a Function library), so the cap need not be
-- read, nor the stream trimmed, on every append: untrimmed[key] counts a
-- stream's appends since its last trim, and a stream counted there had a cap
-- above 0 then.  Each trim_every-th append reads the cap again and trims; the
-- stream may hold trim_every - 1 entries more than the cap.  events_cap (the
-- only way the store changes the cap) forgets the count on this server; a
-- server that held the count from before (a cluster slot moved back) stops
-- within trim_every appends and deletes what it added after a cap of 0.
function EVENTS.flush(kept)
  local n = EVENTS.n
  if n == 0 then return end
  EVENTS.reset()
  local key = K_LIMIT.events
  local since = kept and EVENTS.untrimmed[key]
  if since and since + 1 < EVENTS.trim_every then
    EVENTS.untrimmed[key] = since + 1
    redis.call('XADD', key, '*', 'e', table.concat(EVENTS.buf, '\0', 1, n))
    return
  end
  local cap = tonumber(redis.call('GET', K_LIMIT.evcap) or '') or EVENTS.default
  if cap <= 0 then
    if since then
      EVENTS.forget(key)
      redis.call('DEL', key)
    end
    return
  end
  if kept then
    if not since then
      -- A server that saw many short-lived stores (as tests make) starts over.
      EVENTS.streams = EVENTS.streams + 1
      if EVENTS.streams > 1024 then EVENTS.untrimmed, EVENTS.streams = {}, 1 end
    end
    EVENTS.untrimmed[key] = 0
  end
  redis.call('XADD', key, 'MAXLEN', '~', cap, '*', 'e', table.concat(EVENTS.buf, '\0', 1, n))
end

-- The cap of the stream at key changed: the next append reads it.
function EVENTS.forget(key)
  if EVENTS.untrimmed[key] then
    EVENTS.untrimmed[key] = nil
    EVENTS.streams = EVENTS.streams - 1
  end
end
