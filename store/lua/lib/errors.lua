-- Per-error aggregates, kept when a job fails (ack with a Fail outcome, or stall
-- recovery giving up), so the dashboard's failures view never scans jobs.
--
--   <tag>:errors             zset  group id -> last seen (ms); at most ERRORS_MAX_GROUPS
--   <tag>:error:<gid>        hash  type, module, message (first sample), pattern (the
--                                  normalised message), count, first_seen, last_seen,
--                                  last_job, last_queue, last_name; per queue and job name
--                                  the group failed in, q:<queue> / n:<name> -> failures
--                                  (at most ERROR_GROUPING.MAX_PLACES of each, counted in
--                                  queues_seen / names_seen; failures elsewhere are
--                                  counted in queues_overflow / names_overflow)
--   <tag>:error:<gid>:jobs   zset  job id -> finished_at of its failure; the newest
--                                  ERRORS_MAX_JOBS (older ids and orphans are dropped)
--
-- The job's row remembers its group (hidden field error_group) so that deleting
-- the job (remove, retention, sweeps) also drops it from the group (forget_error).
--
-- A group is one error type with one normalised message (ERROR_GROUPING.normalise:
-- quoted values, uuids, e-mail addresses, hosts, hex ids and numbers become
-- placeholders, so "card 4242 declined for 'bob@x.io'" and "card 9999 declined for
-- 'amy@y.io'" are one error).  store/insights.py mirrors the rules byte for byte
-- (normalise_error_message); a parity test runs both.  When a new group would exceed
-- the cap, the group seen longest ago is evicted with its job set.
local ERRORS_MAX_GROUPS = 1000
local ERRORS_MAX_JOBS = 10000
local ERROR_MESSAGE_MAX = 300

-- Grouping helpers in one table (the chunk is close to Lua's 200-local limit).
-- Every class is spelled with ASCII ranges (never %w/%a/%x: those follow the C
-- locale), so that the Python mirror's byte regexes match exactly the same bytes.
local ERROR_GROUPING = { MAX_PLACES = 20 }

-- A hostname or IPv4 address (token without its port); with a port, one dot is
-- enough (db-3.internal:5432) and localhost counts; without, a name needs two dots
-- and an alphabetic last label (api.example.com), so file.ext and a.b stay text.
function ERROR_GROUPING.is_host(name, with_port)
  if string.find(name, '^[0-9]+%.[0-9]+%.[0-9]+%.[0-9]+$') then return true end
  if with_port and name == 'localhost' then return true end
  if not string.find(name, '^[A-Za-z0-9][A-Za-z0-9.%-]*%.[A-Za-z]+$') then return false end
  if string.find(name, '..', 1, true) then return false end
  local _, dots = string.gsub(name, '%.', '')
  return dots >= (with_port and 1 or 2)
end

-- The message with its variable parts replaced, in this order: quoted values
-- ('...' / "..." not after a letter or digit; a bare identifier such as 'user_id'
-- is kept, it names code) -> '…' / "…"; uuids -> <uuid>; e-mail addresses ->
-- <email>; host:port, IPv4 and dotted hostnames -> <host>; 0x... and hex runs of 8+
-- holding a letter -> <hex>; remaining digit runs -> <n>.  Bounded: the message is
-- at most ERROR_MESSAGE_MAX bytes and each pass is one gsub over it.
function ERROR_GROUPING.normalise(message)
  local A = 'A-Za-z0-9'
  local H = '[0-9a-fA-F]'
  local WORD_START, WORD_END = '%f[' .. A .. ']', '%f[^' .. A .. ']'
  -- A leading space lets a quote open the message (the rule wants a non-word before it).
  local s = ' ' .. message
  for _, q in ipairs({ "'", '"' }) do
    s = string.gsub(s, '([^' .. A .. '])' .. q .. '([^' .. q .. ']*)' .. q, function(pre, body)
      if string.find(body, '^[A-Za-z_][A-Za-z0-9_]*$') then return nil end
      return pre .. q .. '…' .. q
    end)
  end
  local uuid = string.rep(H, 8) .. '%-' .. string.rep(H, 4) .. '%-' .. string.rep(H, 4)
    .. '%-' .. string.rep(H, 4) .. '%-' .. string.rep(H, 12)
  s = string.gsub(s, WORD_START .. uuid .. WORD_END, '<uuid>')
  s = string.gsub(s, '[A-Za-z0-9._%%+%-]+@[A-Za-z0-9.%-]+%.[A-Za-z]+', '<email>')
  s = string.gsub(s, '%f[A-Za-z0-9_]([A-Za-z0-9_.%-]+):[0-9]+', function(name)
    if ERROR_GROUPING.is_host(name, true) then return '<host>' end
  end)
  s = string.gsub(s, '%f[A-Za-z0-9_]([A-Za-z0-9_.%-]+)', function(token)
    local name, rest = string.match(token, '^(.-)([.%-]*)$')
    if ERROR_GROUPING.is_host(name, false) then return '<host>' .. rest end
  end)
  s = string.gsub(s, WORD_START .. '0[xX]' .. H .. '+' .. WORD_END, '<hex>')
  s = string.gsub(s, WORD_START .. '(' .. H .. '+)' .. WORD_END, function(run)
    if #run >= 8 and string.find(run, '[a-fA-F]') then return '<hex>' end
  end)
  s = string.gsub(s, '[0-9]+', '<n>')
  return string.sub(s, 2)
end

-- The first ERROR_MESSAGE_MAX bytes of a message; a cut inside a UTF-8 character would
-- leave bytes no client decodes (the dashboard reads replies as text), so they go too.
function ERROR_GROUPING.cut(message)
  local cut = string.sub(message, 1, ERROR_MESSAGE_MAX)
  if string.find(message, '^[\128-\191]', ERROR_MESSAGE_MAX + 1) then
    cut = string.gsub(cut, '[\192-\255]?[\128-\191]*$', '')
  end
  return cut
end

-- Count one failure of the group hash ek in a queue (kind 'q') or job name ('n').
function ERROR_GROUPING.note_place(ek, kind, value, plural)
  local field = kind .. ':' .. value
  if redis.call('HEXISTS', ek, field) == 0 then
    if tonumber(redis.call('HGET', ek, plural .. '_seen') or '0') >= ERROR_GROUPING.MAX_PLACES then
      redis.call('HINCRBY', ek, plural .. '_overflow', 1)
      return
    end
    redis.call('HINCRBY', ek, plural .. '_seen', 1)
  end
  redis.call('HINCRBY', ek, field, 1)
end

-- (type, module, message) of a failure exit {"error": {...}}, else of a reason text.
local function error_shape(exit_json, reason)
  if exit_json then
    local ok, doc = pcall(cjson.decode, exit_json)
    if ok and type(doc) == 'table' and type(doc.error) == 'table' then
      local e = doc.error
      local t = type(e.type) == 'string' and e.type or 'Error'
      local m = type(e.message) == 'string' and e.message or ''
      local mod = type(e.module) == 'string' and e.module or ''
      return t, mod, m
    end
    return '(exit)', '', exit_json
  end
  return '(no exit)', '', reason or ''
end

-- Count a failure of job id (its snapshot j); call it before the terminal transition,
-- so a keep policy that prunes the job at once also takes it out of the group.
local function record_error(id, j, exit_json, reason, now)
  local etype, emodule, message = error_shape(exit_json, reason)
  message = ERROR_GROUPING.cut(message)
  local pattern = ERROR_GROUPING.normalise(message)
  local gid = string.sub(redis.sha1hex(emodule .. NUL .. etype .. NUL .. pattern), 1, 16)
  local ek = k_error(gid)
  local index = k_errors()
  if redis.call('EXISTS', ek) == 0 then
    if redis.call('ZCARD', index) >= ERRORS_MAX_GROUPS then
      local oldest = redis.call('ZRANGE', index, 0, 0)[1]
      if oldest then
        redis.call('ZREM', index, oldest)
        redis.call('DEL', k_error(oldest), k_error_jobs(oldest))
      end
    end
    redis.call('HSET', ek, 'type', etype, 'module', emodule, 'message', message,
      'pattern', pattern, 'first_seen', fmt(now), 'count', '0')
  end
  redis.call('HINCRBY', ek, 'count', 1)
  redis.call('HSET', ek, 'last_seen', fmt(now), 'last_job', id, 'last_queue', j.queue,
    'last_name', j.name)
  ERROR_GROUPING.note_place(ek, 'q', j.queue, 'queues')
  ERROR_GROUPING.note_place(ek, 'n', j.name, 'names')
  redis.call('ZADD', index, now, gid)
  redis.call('HSET', k_job(id), 'error_group', gid)
  local jobs = k_error_jobs(gid)
  redis.call('ZADD', jobs, now, id)
  local kept = redis.call('ZCARD', jobs)
  if kept > ERRORS_MAX_JOBS then
    redis.call('ZREMRANGEBYRANK', jobs, 0, kept - ERRORS_MAX_JOBS - 1)
  end
end

-- A job row is being deleted: take it out of its error group.
local function forget_error(id, gid)
  if not gid then return end
  redis.call('ZREM', k_error_jobs(gid), id)
  if redis.call('HGET', k_error(gid), 'last_job') == id then
    redis.call('HDEL', k_error(gid), 'last_job')
  end
end
