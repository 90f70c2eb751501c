-- retry: revive a failed job with a fresh budget (admin).
--
-- KEYS[1]  the store's hash tag
-- ARGV[1]  now   ARGV[2]  id
--
-- Reply: {'ok', queue} | {'notfound'} | {'state', state}
-- The ledger is kept (numbering continues); flow state and rows are kept; the
-- dedupe key is not re-registered.
local now = tonumber(ARGV[1])
local id = ARGV[2]
local j = snapshot(id)
if not j then return { 'notfound' } end
if j.state ~= 'failed' then return { 'state', j.state } end
local jk = k_job(id)
redis.call('ZREM', k_finished('failed'), id)
redis.call('ZREM', k_terminal(j.name, 'failed'), id)
redis.call('ZREM', K_KEEPAGE, id)
unfold_attempt(id)
redis.call('HSET', jk, 'am', '0', 'stalled_count', '0')
redis.call('HDEL', jk, 'cancel_requested', 'fa', 'pa')
del_long(jk, 'exit')
del_long(jk, 'failed_reason')
j.am = 0
make_waiting(id, j, redis.call('INCR', K_SEQ), now, now, 'retrying', '{"manual":true}')
wake(j.queue)
return { 'ok', j.queue }
