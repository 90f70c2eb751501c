-- Commands over argument arrays of any length.
--
-- redis.call(cmd, key, unpack(args)) puts every element of args on the Lua C
-- stack, which holds about 8000 values (LUAI_MAXCSTACK).  Past that, unpack
-- fails with "too many results to unpack", in the middle of a script that may
-- have written already, and Redis does not roll a script back: a job field of
-- ~252 KB in 63-byte pieces did exactly that.  call_runs sends the array in
-- runs of a fixed size instead, so no length of a value or of a list can make
-- a write fail half-way (the script is still one atomic step for every other
-- client).  Every other unpack in the scripts is over a list of a small,
-- fixed size.

-- cmd key args[from..to], in runs of at most 512 elements; step is the
-- elements of one item (2 for field/value or score/member pairs), so a run
-- never splits an item.  Returns the sum of the replies (HSET, ZADD, ZREM
-- and HDEL count what they added or removed).
local function call_runs(cmd, key, args, from, to, step)
  local run = 512 - 512 % step
  local total = 0
  for i = from, to, run do
    local last = math.min(i + run - 1, to)
    -- Literal command names, so the key-discipline check knows each key position.
    if cmd == 'HSET' then
      total = total + redis.call('HSET', key, unpack(args, i, last))
    elseif cmd == 'ZADD' then
      total = total + redis.call('ZADD', key, unpack(args, i, last))
    elseif cmd == 'ZREM' then
      total = total + redis.call('ZREM', key, unpack(args, i, last))
    elseif cmd == 'HDEL' then
      total = total + redis.call('HDEL', key, unpack(args, i, last))
    else
      error('call_runs: unsupported command ' .. tostring(cmd))
    end
  end
  return total
end
