-- The store's event stream (read by RedisJobStore.events, store/events.py).
--
-- Every state transition appends one entry to the capped stream
-- K_LIMIT.events inside the call that makes it, so a reader sees the
-- transitions of a job in the order they happened and never one that did not
-- happen.  An entry always has the same seven fields in the same order (a
-- stream node stores an entry whose fields equal its first entry's as values
-- only): t the event type, j the job id, n its name, q its queue, a the
-- attempt (the run number; 0 before the first run), at the caller's clock in
-- ms, d the event's data as JSON ('' for none).
--
-- The cap is the store-wide setting K_LIMIT.evcap (absent: EVENTS.default
-- entries; 0: no events are written), read at most once per call (begin_call
-- forgets it).  The stream is trimmed approximately (MAXLEN ~): Redis drops
-- whole nodes, so it holds the cap plus at most one node of entries.
-- One table rather than locals: the joined library is near Lua's 200 locals.
local EVENTS = { default = 10000 }

function EVENTS.emit(kind, id, name, queue, attempt, now, data)
  local cap = EVENTS.cap
  if cap == nil then
    cap = tonumber(redis.call('GET', K_LIMIT.evcap) or '') or EVENTS.default
    EVENTS.cap = cap
  end
  if cap <= 0 then return end
  redis.call('XADD', K_LIMIT.events, 'MAXLEN', '~', cap, '*', 't', kind, 'j', id, 'n', name,
    'q', queue, 'a', attempt or 0, 'at', string.format('%.0f', now), 'd', data or '')
end
