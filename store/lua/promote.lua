-- promote: make a delayed job runnable now, keeping its FIFO position (admin).
--
-- KEYS[1]  the store's hash tag
-- ARGV[1]  now   ARGV[2]  id
--
-- Reply: {'ok', queue} | {'notfound'} | {'state', state}
local now = tonumber(ARGV[1])
local id = ARGV[2]
local j = snapshot(id)
if not j then return { 'notfound' } end
if j.state ~= 'delayed' then return { 'state', j.state } end
make_waiting(id, j, j.seq, now, now, 'promoted')
wake(j.queue)
return { 'ok', j.queue }
