-- Per-call set-up: bind the store's keys and forget the previous call's owed
-- work and whether the chunked sets' head was folded (a Function library's
-- locals outlive a call; a script's do not).
local function begin_call(tag)
  bind(tag)
  OWED = {}
  -- Slots a failed call freed (with_owed publishes and empties it otherwise).
  if next(LIMITS.freed) ~= nil then LIMITS.freed = {} end
  CZ_FOLDED = false
  -- Events of a call that failed half-way (a Function library keeps its state).
  if EVENTS.n > 0 then EVENTS.reset() end
  -- Counters of such a call (lib/tally.lua).
  if TALLY.dirty then TALLY.reset() end
  -- Set writes held by a batch of acks that failed half-way (lib/retention.lua).
  if HELD.on then HELD.on, HELD.zadd, HELD.order, HELD.zrem = false, {}, {}, {} end
end
