-- events_cap: set how many entries the store's event stream keeps.
--
-- KEYS[1]  the store's hash tag
-- ARGV[1]  the cap: a whole number from 0 (0: no events are written, and the
--          stream is deleted)
--
-- Trims the stream to the new cap at once (approximately, as the appends do),
-- and makes this server's next append read the cap again (EVENTS.forget).
local cap = tonumber(ARGV[1])
redis.call('SET', K_LIMIT.evcap, ARGV[1])
if cap == 0 then
  redis.call('DEL', K_LIMIT.events)
else
  redis.call('XTRIM', K_LIMIT.events, 'MAXLEN', '~', cap)
end
EVENTS.forget(K_LIMIT.events)
return 1
