-- progress: record a running job's progress (its handler's current_job().progress).
--
-- KEYS[1]  the store's hash tag
-- ARGV[1]  now   ARGV[2]  id   ARGV[3]  the run's lock token
-- ARGV[4]  the progress value as JSON (checked small by the caller)
--
-- Reply: {'ok'} | {'notfound'} | {'locklost'} (the job is not active under that
-- token: the run lost its lock, so nothing is written and no event appended).
local now, id = tonumber(ARGV[1]), ARGV[2]
local jk = k_job(id)
local f = redis.call('HMGET', jk, 'state', 'lock_token', 'name', 'queue', 'am')
if not f[1] then return { 'notfound' } end
if f[1] ~= 'active' or f[2] ~= ARGV[3] or not f[3] or not f[4] then return { 'locklost' } end
set_long(jk, 'progress', ARGV[4])
EVENTS.emit('progress', id, f[3], f[4], (tonumber(f[5]) or 0) + 1, now, ARGV[4])
return { 'ok' }
