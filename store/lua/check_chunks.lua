-- check_chunks: mqcheck over the structure of one chunked set
-- (lib/chunks.lua: the all-jobs set, a name or queue index).
--
-- KEYS[1]  the store's hash tag
-- ARGV[1]  '1' to repair, '0' to report only
-- ARGV[2]  set: 'all' | 'byname' (ARGV[3] name) | 'byqueue' (ARGV[3] queue)
-- ARGV[4]  what:
--   'entries' ARGV[5..] directory entries (at most 500): an entry whose chunk
--             is gone (repair: the entry is removed) or whose bound is not
--             its chunk's first member (repair: the bound moves to it).
--             Reply: {problems, members}: members = the sizes of the
--             entries' chunks, summed.
--   'chunks'  ARGV[5..] chunk numbers (at most 500): a chunk its directory
--             does not name (repair: its members are added to the set and
--             the chunk deleted).  Reply: {problems, 0}.
--   'size'    ARGV[5] the size mqcheck read, ARGV[6] the members it counted:
--             compare-and-set of the size counter.  Reply: {{}, 1 | 0}.
-- problems: flat (kind, subject, detail) triples of kind 'index_chunk'.
-- Rows single inserts left in the chunked sets' head join their chunks first.
cz_fold()
local repair = ARGV[1] == '1'
local kind, arg, what = ARGV[2], ARGV[3], ARGV[4]
local dir = cz_set_key(kind, arg)
local subject = kind == 'all' and 'all' or (kind .. ':' .. arg)
local out = {}
local function report(detail)
  out[#out + 1] = 'index_chunk'
  out[#out + 1] = subject
  out[#out + 1] = detail
end

if what == 'size' then
  local current = tonumber(redis.call('HGET', k_ixcount(), dir)) or 0
  if current ~= tonumber(ARGV[5]) then return { out, 0 } end
  redis.call('HSET', k_ixcount(), dir, ARGV[6])
  return { out, 1 }
end

if what == 'entries' then
  local members = 0
  for i = 5, #ARGV do
    local entry = ARGV[i]
    local score = redis.call('ZSCORE', dir, entry)
    if score then
      local bound, n = cz_parse(entry)
      local ck = cz_chunk(dir, n)
      local head = redis.call('ZRANGE', ck, 0, 0, 'WITHSCORES')
      if #head == 0 then
        report('directory entry of chunk ' .. n .. ', which is gone')
        if repair then redis.call('ZREM', dir, entry) end
      else
        members = members + redis.call('ZCARD', ck)
        if head[1] ~= bound or tonumber(head[2]) ~= tonumber(score) then
          report('chunk ' .. n .. ' starts at ' .. head[1] .. ', its bound says ' .. bound)
          -- Only a bound below the first member moves (a member below its bound
          -- would be out of order: it is left for the member checks to see).
          if repair and cz_before(tonumber(score), bound, tonumber(head[2]), head[1]) then
            redis.call('ZREM', dir, entry)
            redis.call('ZADD', dir, head[2], head[1] .. NUL .. n)
          end
        end
      end
    end
  end
  return { out, members }
end

if what == 'chunks' then
  for i = 5, #ARGV do
    local n = ARGV[i]
    local ck = cz_chunk(dir, n)
    local head = redis.call('ZRANGE', ck, 0, 0, 'WITHSCORES')
    if #head > 0 then
      local m = cz_locate(dir, tonumber(head[2]), head[2], head[1])
      local at = m and select(2, cz_parse(m))
      if at ~= n then
        local flat = redis.call('ZRANGE', ck, 0, -1, 'WITHSCORES')
        report('chunk ' .. n .. ' (' .. (#flat / 2) .. ' members) is not in the directory')
        if repair then
          redis.call('DEL', ck)
          cz_add_sorted(dir, flat) -- a chunk's members come in the set's order
        end
      end
    end
  end
  return { out, 0 }
end
return redis.error_reply('check_chunks: unknown check ' .. what)
