-- index_members: (re)index a chunk of job ids into the name or queue index.
--
-- KEYS[1]  the store's hash tag
-- ARGV[1]  kind: 'name' | 'queue'   ARGV[2..]  job ids (at most 500)
--
-- Reply: the number of rows indexed (ids whose row is gone, or lacks its
-- name, queue or enqueued_at, are skipped).
-- Idempotent adds scored by enqueued_at, so re-visits are harmless.
-- Rows single inserts left in the chunked sets' head join their chunks first.
cz_fold()
local kind = ARGV[1]
local indexed = 0
for i = 2, #ARGV do
  local id = ARGV[i]
  local f = redis.call('HMGET', k_job(id), 'name', 'queue', 'enqueued_at')
  if f[1] and f[2] and f[3] then
    if kind == 'name' then
      cz_add(k_byname(f[1]), f[3], id)
    else
      cz_add(k_byqueue(f[2]), f[3], id)
    end
    indexed = indexed + 1
  end
end
return indexed
