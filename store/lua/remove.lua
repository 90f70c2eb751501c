-- remove: delete a job that is not active and not a parked flow parent (admin).
--
-- KEYS[1]  the store's hash tag
-- ARGV[1]  id
--
-- Reply: 1 when deleted, 0 for unknown, active or waiting-children jobs.
-- An operator override: it appends nothing to the outbox and ignores the
-- cascade-retention exemption.
local id = ARGV[1]
local state = redis.call('HGET', k_job(id), 'state')
if (not state) or state == 'active' or state == 'waiting-children' then return 0 end
delete_job(id)
return 1
