-- release: hand a held job back without consuming an attempt (worker shutdown).
--
-- KEYS[1]  the store's hash tag
-- ARGV[1]  now   ARGV[2]  id   ARGV[3]  token
--
-- Reply: {'ok', queue} | {'notfound'} | {'locklost'}
-- The job returns to its old FIFO position; a pending cancel is honoured
-- instead (cancelled, one ledger entry, no attempt used).
local now = tonumber(ARGV[1])
local id, token = ARGV[2], ARGV[3]
local j = snapshot(id)
if not j then return ack_missing(id) end
if j.state ~= 'active' or j.lock_token ~= token then return { 'locklost' } end
if j.cancel_requested then
  finish_cancelled(id, j, now)
else
  make_waiting(id, j, j.seq, now, nil, 'waiting', '{"released":true}')
  wake(j.queue)
end
return with_owed({ 'ok', j.queue })
