-- migrate_rows: convert job hashes of layout 1 to the current layout (manage.py migrate_store).
--
-- KEYS[1]  the store's hash tag
-- ARGV[1..]  job ids (at most 500 per call; ids without a hash are skipped)
--
-- Reply: the number of hashes rewritten.
-- Layout 1 kept each long value (payload, exit, ...) in one field, which makes
-- the whole hash a hash table once a value is longer than 64 bytes, and named
-- three fields in full.  Such a hash is rebuilt with the same values and TTL:
-- long values in pieces (put_long), processed_at / finished_at / attempts_made
-- as pa / fa / am, run_at dropped while it equals enqueued_at, so Redis stores
-- it as a listpack again (a hash table is never converted back in place).  Its
-- ledger stays as it is (a layout-1 ledger holds every entry; nothing is
-- folded).  A hash already in the current layout is left alone.
local LONG = {
  payload = true, metadata = true, exit = true, failed_reason = true, backoff = true,
  keep = true, trace = true, parent = true, dedupe_key = true,
}
local RENAMED = { processed_at = 'pa', finished_at = 'fa', attempts_made = 'am' }
local rewritten = 0
for i = 1, #ARGV do
  local jk = k_job(ARGV[i])
  local flat = redis.call('HGETALL', jk)
  local values = {}
  local stale = false
  for k = 1, #flat, 2 do
    local field, value = flat[k], flat[k + 1]
    values[field] = value
    if RENAMED[field] or (LONG[field] and #value > PIECE) then stale = true end
  end
  if values.run_at and values.run_at == values.enqueued_at then stale = true end
  if stale then
    local ttl = redis.call('PTTL', jk)
    local h, n = {}, 0
    for k = 1, #flat, 2 do
      local field, value = flat[k], flat[k + 1]
      if LONG[field] then
        n = put_long(h, n, field, value)
      elseif not (field == 'run_at' and value == values.enqueued_at) then
        h[n + 1], h[n + 2], n = RENAMED[field] or field, value, n + 2
      end
    end
    redis.call('DEL', jk)
    call_runs('HSET', jk, h, 1, n, 2)
    if ttl > 0 then redis.call('PEXPIRE', jk, ttl) end
    rewritten = rewritten + 1
  end
end
return rewritten
