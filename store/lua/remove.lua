-- remove: delete a job that is not active and not a parked flow parent (admin).
--
-- KEYS[1]  the store's hash tag
-- ARGV[1]  id   ARGV[2]  now (the 'removed' event's time)
--
-- Reply: 1 when deleted, 0 for unknown, active or waiting-children jobs.
-- An operator override: it appends nothing to the outbox and ignores the
-- cascade-retention exemption.  A remnant hash (its identifying fields lost)
-- is always removable.
local id = ARGV[1]
local f = redis.call('HMGET', k_job(id), 'state', 'queue', 'name', 'seq', 'am')
if is_row(f[1], f[2], f[3], f[4]) then
  if f[1] == 'active' or f[1] == 'waiting-children' then return 0 end
  delete_job(id)
  EVENTS.emit('removed', id, f[3], f[2], tonumber(f[5]) or 0, tonumber(ARGV[2]) or 0, nil)
  return 1
elseif redis.call('EXISTS', k_job(id)) == 0 then
  return 0
end
delete_job(id)
return 1
