-- resume: let a paused queue be claimed again, waking its idle takers.
--
-- KEYS[1]  the store's hash tag
-- ARGV[1]  queue
--
-- Reply: 1 if the queue was paused, else 0 (and nobody is woken).
if redis.call('SREM', K_PAUSED, ARGV[1]) == 1 then
  wake(ARGV[1])
  return 1
end
return 0
