-- enqueue_many: insert a chunk (at most 500) of requests without dedupe policies.
--
-- KEYS[1]  the store's hash tag
-- ARGV[1]  now    ARGV[2]  index flags    ARGV[3]  item count n
-- ARGV[4..]  n requests of REQUEST_WIDTH strings each (see read_request)
--
-- Reply: a flat array, two entries per item in order: code, id, where code is
-- 'new' | 'dup' | 'collision' (id '' for a collision).  Items are
-- checked sequentially, so a repeated explicit id inside one chunk inserts
-- once and reports the rest as duplicates.  The chunk reserves its FIFO
-- ordinals with one INCRBY (batch order = FIFO order), and its index entries,
-- counters and wakes are written once per key at the end.
local now = tonumber(ARGV[1])
local idx = ARGV[2]
local n = tonumber(ARGV[3])
local first = redis.call('INCRBY', K_SEQ, n) - n
local out = {}
local acc = new_acc()
for i = 0, n - 1 do
  local r = read_request(4 + i * REQUEST_WIDTH)
  local code, id, seq = 'new', r.id, first + i + 1
  if r.mode ~= 'auto' then
    if redis.call('EXISTS', k_job(id)) == 1 then
      if r.mode == 'user' then code = 'dup' else code, id = 'collision', '' end
    end
  else
    id, seq = draw_auto_id(seq)
  end
  if code == 'new' then insert_job(id, r, '', now, idx, seq, acc) end
  out[#out + 1] = code
  out[#out + 1] = id
end
flush_acc(acc)
return out
