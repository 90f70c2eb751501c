-- set_limits: replace (or clear) the limits of a queue.
--
-- KEYS[1]  the store's hash tag
-- ARGV[1]  queue   ARGV[2]  the settings (see lib/limits.lua), '' = clear
--
-- Reply: 'ok'.  Publishes a wake for the queue: claimers held back by the old
-- limits try again under the new ones.  Setting keeps the rate's last claim
-- time (a new rate spaces claims from it); clearing forgets it, the count of
-- active claims, the groups' last claims and the waiting-claimer mark
-- (groups held back by the old limits take turns again at the next claims).  Jobs already active when a
-- queue becomes limited are counted by limits_adopt (called by the store
-- right after, in pages of the active set).
local queue, settings = ARGV[1], ARGV[2]
if settings == '' then
  redis.call('HDEL', K_LIMIT.settings, queue)
  redis.call('HDEL', K_LIMIT.rate, queue, NUL .. queue)
  redis.call('SREM', K_LIMIT.blocked, queue)
  redis.call('DEL', K_LIMIT.active .. queue, K_LIMIT.gtat .. queue, K_LIMIT.gcool .. queue)
else
  redis.call('HSET', K_LIMIT.settings, queue, settings)
end
wake(queue)
return 'ok'
