-- cancel: cancel a job (admin, producer, flow cascade).
--
-- KEYS[1]  the store's hash tag
-- ARGV[1]  now   ARGV[2]  id
--
-- Reply: {'ok'} | {'notfound'} | {'state', state}
-- waiting/delayed finish as cancelled now; an active job only gets its cancel
-- request flag (the holder learns it from its next heartbeat).
return with_owed(cancel_job(ARGV[2], tonumber(ARGV[1])))
