-- enqueue_many: insert a chunk (at most 500) of requests without dedupe policies.
--
-- KEYS[1]  the store's hash tag
-- ARGV[1]  now    ARGV[2]  index flags    ARGV[3]  item count n
-- ARGV[4..]  n requests of REQUEST_WIDTH strings each (see read_request)
--
-- Reply: one entry per item, in order: the new job's id; NUL followed by the
-- existing job's id for a duplicate; '' for a collision (a generated or
-- auto id that names an existing job: the caller sends the item again).  Items are checked
-- sequentially, so a repeated explicit id inside one chunk inserts once and
-- reports the rest as duplicates.  The chunk reserves its FIFO ordinals with
-- one INCRBY (batch order = FIFO order), and its index entries, counters and
-- wakes are written once per key at the end.
local now = tonumber(ARGV[1])
local idx = ARGV[2]
local n = tonumber(ARGV[3])
local first = redis.call('INCRBY', K_SEQ, n) - n
local out = {}
local acc = new_acc()
-- Every row shares the score "now" in the all-jobs set and the indexes, so
-- rows whose ids ascend as bytes arrive in the sets' order.  Auto ids do:
-- 'j-<first + i>' in item order, as long as the ordinals keep one number of
-- digits (across a power of ten, 'j-1000' sorts before 'j-999').  An explicit
-- or generated id in the batch leaves the order to the sort.
acc.in_order = #fmt(first + 1) == #fmt(first + n)
local r
-- Set once an explicit id of the store's own "j-<n>" shape is inserted: it may
-- name an ordinal this chunk reserved, so later auto ids are probed.
local probe = false
for i = 1, n do
  r = read_request(4 + (i - 1) * REQUEST_WIDTH, r)
  local seq = fmt(first + i)
  local id = r.id
  if r.mode == 'auto' then
    id = 'j-' .. seq
    -- A skipped row leaves the others in order.
    if probe and redis.call('EXISTS', k_job(id)) == 1 then id, seq = '', nil end
  else
    acc.in_order = false
    if redis.call('EXISTS', k_job(id)) == 1 then
      if r.mode == 'user' then id = NUL .. id else id = '' end
      seq = nil
    elseif string.byte(id, 1) == 106 and string.byte(id, 2) == 45 then -- 'j-'
      probe = true
    end
  end
  if seq then insert_job(id, r, '', now, idx, seq, acc) end
  out[i] = id
end
flush_acc(acc)
return out
