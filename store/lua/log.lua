-- log: append a line to a running job's log (its handler's current_job().log).
--
-- KEYS[1]  the store's hash tag
-- ARGV[1]  now   ARGV[2]  id   ARGV[3]  the run's lock token
-- ARGV[4]  the message (cut to the per-line limit by the caller)
-- ARGV[5]  most lines kept   ARGV[6]  most bytes kept (line texts)
-- ARGV[7]  the event's data as JSON
--
-- The log is the list K_LIMIT.logs .. id, one item "<ms> <message>" per line,
-- oldest first; the job hash counts its bytes (lb) and the lines dropped from
-- its front (ld).  Past either cap the oldest lines go, at most LOG_TRIM per
-- call (a lowered cap is reached over the next calls).  The list is deleted
-- with the job (lib/retention.lua).
--
-- Reply: {'ok', lines kept} | {'notfound'} | {'locklost'} (nothing written).
local now, id = tonumber(ARGV[1]), ARGV[2]
local jk = k_job(id)
local f = redis.call('HMGET', jk, 'state', 'lock_token', 'name', 'queue', 'am')
if not f[1] then return { 'notfound' } end
if f[1] ~= 'active' or f[2] ~= ARGV[3] or not f[3] or not f[4] then return { 'locklost' } end
local lk = K_LIMIT.logs .. id
local line = string.format('%.0f', now) .. ' ' .. ARGV[4]
local n = redis.call('RPUSH', lk, line)
local bytes = redis.call('HINCRBY', jk, 'lb', #line)
local max_lines, max_bytes = tonumber(ARGV[5]), tonumber(ARGV[6])
local dropped, freed = 0, 0
while n > 1 and dropped < 500 and (n > max_lines or bytes - freed > max_bytes) do
  local old = redis.call('LPOP', lk)
  if not old then break end
  freed = freed + #old
  n = n - 1
  dropped = dropped + 1
end
if dropped > 0 then
  redis.call('HINCRBY', jk, 'lb', -freed)
  redis.call('HINCRBY', jk, 'ld', dropped)
end
EVENTS.emit('log', id, f[3], f[4], (tonumber(f[5]) or 0) + 1, now, ARGV[7])
return { 'ok', n }
