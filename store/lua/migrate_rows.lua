-- migrate_rows: rewrite job hashes of layout 1 in the current layout (manage.py migrate_store).
--
-- KEYS[1]  the store's hash tag
-- ARGV[1..]  job ids (at most 500 per call; ids without a hash are skipped)
--
-- Reply: the number of hashes rewritten.
-- Layout 1 kept each long value (payload, exit, ...) in one field, which makes
-- the whole hash a hash table once a value is longer than 64 bytes.  Such a
-- hash is rebuilt with the same fields and the same TTL, long values in pieces
-- (put_long), so Redis stores it as a listpack again (a hash table is never
-- converted back in place).  A hash already in the current layout is left alone.
local LONG = {
  payload = true, metadata = true, exit = true, failed_reason = true, backoff = true,
  keep = true, trace = true, parent = true, dedupe_key = true,
}
local rewritten = 0
for i = 1, #ARGV do
  local jk = k_job(ARGV[i])
  local flat = redis.call('HGETALL', jk)
  local stale = false
  for k = 1, #flat, 2 do
    if LONG[flat[k]] and #flat[k + 1] > PIECE then
      stale = true
      break
    end
  end
  if stale then
    local ttl = redis.call('PTTL', jk)
    local h, n = {}, 0
    for k = 1, #flat, 2 do
      if LONG[flat[k]] then
        n = put_long(h, n, flat[k], flat[k + 1])
      else
        h[n + 1], h[n + 2], n = flat[k], flat[k + 1], n + 2
      end
    end
    redis.call('DEL', jk)
    redis.call('HSET', jk, unpack(h))
    if ttl > 0 then redis.call('PEXPIRE', jk, ttl) end
    rewritten = rewritten + 1
  end
end
return rewritten
