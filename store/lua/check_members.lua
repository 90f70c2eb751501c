-- check_members: mqcheck over one page of members of one of the store's sets.
--
-- KEYS[1]  the store's hash tag
-- ARGV[1]  '1' to repair, '0' to report only
-- ARGV[2]  set kind: 'all' | 'active' | 'keepage' | 'delayed' (ARGV[3] queue) |
--          'waiting' (ARGV[3] queue, ARGV[4] name) | 'finished' (ARGV[3] state) |
--          'terminal' (ARGV[3] state, ARGV[4] name) | 'byname' (ARGV[3] name) |
--          'byqueue' (ARGV[3] queue) | 'limitactive' (ARGV[3] queue: the claims
--          of a limited queue, lib/limits.lua) | 'groupwaiting' (ARGV[3] queue,
--          ARGV[4] name: grouped waiting jobs) | 'groupwait' (ARGV[3] queue,
--          ARGV[4] group: a group's waiting jobs) | 'groupactive' (ARGV[3]
--          queue, ARGV[4] group: a group's claims)
-- ARGV[5..]  members (at most 500; members gone from the set by now are skipped);
--          for the chunked sets (all, byname, byqueue) member, score pairs
--
-- Reply: {problems, counters}.  problems: flat (kind, id, detail) triples:
--   dangling_member   the member's job hash is gone (repair: removed, with the
--                     counter of the state the set stands for)
--   wrong_set_member  the job is in another state, queue or name than the set
--                     stands for, or a chunked set lists it under another score
--                     than its enqueued_at (repair: removed; the row is counted
--                     elsewhere, and check_jobs lists it under the right score)
--   stray_lock        an active-set entry (a lock) of a job that is not active,
--                     or a limited queue's claim of a job that is not active in
--                     that queue under a limited claim (repair: removed)
-- counters: the counter fields the repair decremented (mqcheck's bookkeeping).
-- Remnant hashes (identifying fields lost) are check_jobs' to report.
-- Rows single inserts left in the chunked sets' head join their chunks first.
cz_fold()
local repair = ARGV[1] == '1'
local kind, a, b = ARGV[2], ARGV[3], ARGV[4]
local key, chunked
if kind == 'all' then key = K_ALL
elseif kind == 'active' then key = K_ACTIVE
elseif kind == 'keepage' then key = K_KEEPAGE
elseif kind == 'delayed' then key = k_delayed(a)
elseif kind == 'waiting' then key = k_waiting(a, b)
elseif kind == 'finished' then key = k_finished(a)
elseif kind == 'terminal' then key = k_terminal(b, a)
elseif kind == 'byname' then key = k_byname(a)
elseif kind == 'byqueue' then key = k_byqueue(a)
elseif kind == 'limitactive' then key = K_LIMIT.active .. a
elseif kind == 'groupwaiting' then key = K_LIMIT.gwaiting .. a .. NUL .. b
elseif kind == 'groupwait' then key = K_LIMIT.gwait .. a .. NUL .. b
elseif kind == 'groupactive' then key = K_LIMIT.gactive .. a .. NUL .. b
else return redis.error_reply('check_members: unknown set kind ' .. kind) end
chunked = kind == 'all' or kind == 'byname' or kind == 'byqueue'

local out, counters = {}, {}
local function report(problem, id, detail)
  out[#out + 1] = problem
  out[#out + 1] = id
  out[#out + 1] = detail
end

-- The counter a dangling member of this set held (nil: the set holds none).
local function uncount_for(id)
  local field
  if kind == 'waiting' or kind == 'groupwaiting' then field = uncount(a, 'waiting')
  elseif kind == 'delayed' then field = uncount(a, 'delayed')
  elseif kind == 'active' or kind == 'finished' then
    local state = kind == 'active' and 'active' or a
    local queue = orphan_queue(id, state)
    if queue then field = uncount(queue, state) end
  end
  if field then counters[#counters + 1] = field end
end

local step = chunked and 2 or 1
local score
local function listed(member)
  if chunked then return cz_has(key, score, member) end
  return redis.call('ZSCORE', key, member)
end
local function unlist(member)
  if chunked then cz_rem(key, score, member) else redis.call('ZREM', key, member) end
end

for i = 5, #ARGV, step do
  local member = ARGV[i]
  score = ARGV[i + 1]
  if listed(member) then
    local id = member
    if kind == 'waiting' or kind == 'groupwaiting' or kind == 'groupwait' then
      id = string.sub(member, WAITING_SEQ_WIDTH + 1)
    end
    local f = redis.call('HMGET', k_job(id), 'state', 'queue', 'name', 'seq', 'enqueued_at', 'lq', 'group')
    local state, queue, name, seq = f[1], f[2], f[3], f[4]
    if not is_row(state, queue, name, seq) then
      if redis.call('EXISTS', k_job(id)) == 0 then
        report('dangling_member', id, kind)
        if repair then
          unlist(member)
          uncount_for(id)
        end
      end
    elseif chunked and f[5] and tonumber(f[5]) ~= tonumber(score) then
      report('wrong_set_member', id, kind .. ' (listed at ' .. score .. ', enqueued at ' .. f[5] .. ')')
      if repair then unlist(member) end
    else
      local fits
      if kind == 'all' then fits = true
      elseif kind == 'active' then fits = state == 'active'
      elseif kind == 'keepage' then fits = is_terminal(state)
      elseif kind == 'delayed' then fits = state == 'delayed' and queue == a
      elseif kind == 'waiting' then
        fits = state == 'waiting' and queue == a and name == b and not f[7] and waiting_member(seq, id) == member
      elseif kind == 'groupwaiting' then
        fits = state == 'waiting' and queue == a and name == b and f[7] and waiting_member(seq, id) == member
      elseif kind == 'groupwait' then
        fits = state == 'waiting' and queue == a and f[7] == b and waiting_member(seq, id) == member
      elseif kind == 'groupactive' then
        fits = state == 'active' and queue == a and f[6] and f[7] == b
      elseif kind == 'finished' then fits = state == a
      elseif kind == 'terminal' then fits = state == a and name == b
      elseif kind == 'byname' then fits = name == a
      elseif kind == 'limitactive' then fits = state == 'active' and queue == a and f[6] == '1'
      else fits = queue == a end
      if not fits then
        if kind == 'active' then
          report('stray_lock', id, state)
        elseif kind == 'limitactive' then
          report('stray_lock', id, 'limits:active:' .. a .. ' (job is ' .. state .. ' in ' .. queue .. ')')
        elseif kind == 'groupactive' then
          report('stray_lock', id, 'groups:active:' .. a .. '/' .. b .. ' (job is ' .. state .. ' in ' .. queue .. ')')
        else
          report('wrong_set_member', id, kind .. ' (job is ' .. state .. ')')
        end
        if repair then unlist(member) end
      end
    end
  end
end
return { out, counters }
