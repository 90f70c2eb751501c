-- Key builders.  Every key of one store lives under the hash tag bound per
-- call (the string "{<prefix>}", KEYS[1]), so a store occupies a single Redis
-- Cluster slot.  Two user strings inside one key or member are joined with
-- NUL, because ids, names, queues and dedupe keys may all contain ":".
-- Mirrors store/keys.py.  bind() runs at the start of every call: the same
-- library serves any number of stores (and, loaded as a Redis Function
-- library, lives across calls).
local NUL = '\0'
local B
local K_SEQ, K_ALL, K_ACTIVE, K_COUNTS, K_PAUSED, K_DEDUPE_WINDOWS, K_DEDUPE_PENDING, K_KEEPAGE, K_WAKE, K_OUTBOX, K_OUTBOX_SEQ, K_FLOW_OWES, K_STATS, K_SCHEDULES, K_QNAMES, K_FLOW_PENDING, K_FLOW_CASCADE, K_FLOW_GC, K_IXPEND

-- Flow control (lib/limits.lua), one table (the joined library keeps its
-- locals few): each limited queue's settings, the time of its last
-- rate-limited claim, the queues a claim found at their concurrency limit
-- (an ack of theirs then wakes one waiting claimer), and per limited queue
-- (K_LIMIT.active .. queue) the jobs holding a claim, scored by lock expiry.
-- Job groups (lib/limits.lua) live here too: per (queue, group) its waiting
-- jobs and its claims; per (queue, name) the grouped waiting jobs (what the
-- waiting listings, oldest-waiting lookups and mqcheck read beside the
-- per-name waiting set); per queue the groups in turn, the groups held back
-- by their limits, each group's rate TAT, and each group's
-- waiting jobs counted (the busiest groups, read in order).
local K_LIMIT = {}

local function bind(tag)
  -- A Function library keeps its state between calls: rebinding the same store is a no-op.
  if B == tag then return end
  B = tag
  K_SEQ = B .. ':seq'
  K_ALL = B .. ':all'
  K_ACTIVE = B .. ':active'
  K_COUNTS = B .. ':counts'
  K_PAUSED = B .. ':paused'
  K_DEDUPE_WINDOWS = B .. ':dedupes:window'
  K_DEDUPE_PENDING = B .. ':dedupes:pending'
  K_KEEPAGE = B .. ':keepage'
  K_WAKE = B .. ':wake'
  K_OUTBOX = B .. ':outbox'
  K_OUTBOX_SEQ = B .. ':outbox:seq'
  K_FLOW_OWES = B .. ':flow:owes'
  K_STATS = B .. ':stats:'
  K_SCHEDULES = B .. ':schedules'
  K_QNAMES = B .. ':qnames'
  K_FLOW_PENDING = B .. ':flow:pending'
  K_FLOW_CASCADE = B .. ':flow:cascade'
  K_FLOW_GC = B .. ':flow:gc'
  K_IXPEND = B .. ':ixpend'
  K_LIMIT.settings = B .. ':limits'
  K_LIMIT.rate = B .. ':limits:rate'
  K_LIMIT.blocked = B .. ':limits:blocked'
  K_LIMIT.active = B .. ':limits:active:' -- .. queue
  K_LIMIT.gwait = B .. ':groups:wait:' -- .. queue .. NUL .. group
  K_LIMIT.gactive = B .. ':groups:active:' -- .. queue .. NUL .. group
  K_LIMIT.gwaiting = B .. ':groups:waiting:' -- .. queue .. NUL .. name
  K_LIMIT.turns = B .. ':groups:turns:' -- .. queue
  K_LIMIT.held = B .. ':groups:held:' -- .. queue
  K_LIMIT.gtat = B .. ':groups:tat:' -- .. queue
  K_LIMIT.gcool = B .. ':groups:cool:' -- .. queue
  K_LIMIT.gsize = B .. ':groups:size:' -- .. queue
  -- The event stream and its cap (lib/events.lua), and per job its log lines
  -- (K_LIMIT.logs .. id; lib/events.lua): kept here, a table, for the same
  -- reason as the flow-control keys.
  K_LIMIT.events = B .. ':events'
  K_LIMIT.evcap = B .. ':events:cap'
  K_LIMIT.logs = B .. ':logs:' -- .. id
  -- Flow parents that settled lately (lib/parked.lua), a table field for the same reason.
  K_LIMIT.settled = B .. ':flows:settled'
end

local function k_job(id) return B .. ':job:' .. id end
local function k_attempts(id) return B .. ':attempts:' .. id end
local function k_waiting(queue, name) return B .. ':waiting:' .. queue .. NUL .. name end
local function k_delayed(queue) return B .. ':delayed:' .. queue end
local function k_finished(state) return B .. ':finished:' .. state end
local function k_terminal(name, state) return B .. ':terminal:' .. state .. ':' .. name end
local function k_byname(name) return B .. ':byname:' .. name end
local function k_byqueue(queue) return B .. ':byqueue:' .. queue end
local function k_dedupe(member) return B .. ':dedupe:' .. member end
local function k_schedule(key) return B .. ':schedule:' .. key end
local function k_flowchild(flow_id, child_key) return B .. ':flowchild:' .. flow_id .. NUL .. child_key end
local function k_flowchildren(flow_id) return B .. ':flowchildren:' .. flow_id end
-- Lifetime finished counters (field "<queue>|<state>") and the per-job-name run
-- aggregates of one minute / one clock hour (hashes that expire on their own).
local function k_finished_total() return B .. ':finishedtotal' end
local function k_jobmetrics_minute(minute, name) return B .. ':jobmetrics:m:' .. minute .. ':' .. name end
local function k_jobmetrics_hour(hour, name) return B .. ':jobmetrics:h:' .. hour .. ':' .. name end
-- Flow parents of a queue parked in waiting-children (lib/parked.lua).
local function k_parked(queue) return B .. ':parked:' .. queue end
-- Per-error aggregates (lib/errors.lua): the group index, a group, its jobs.
local function k_errors() return B .. ':errors' end
local function k_error(gid) return B .. ':error:' .. gid end
local function k_error_jobs(gid) return B .. ':error:' .. gid .. ':jobs' end
-- The chunked sets (lib/chunks.lua): chunk-number counter, members per set,
-- and the scratch set Redis sorts a batch in (deleted in the same call).
local function k_ixseq() return B .. ':ixseq' end
local function k_ixcount() return B .. ':ixcount' end
local function k_czsort() return B .. ':czsort' end
-- Where migrate_set keeps the rest of the plain set key (a key of this store)
-- while it turns it into a chunked set.
local function k_migrating(key) return B .. ':migrate:' .. string.sub(key, #B + 2) end
local function flow_member(flow_id, child_key) return flow_id .. NUL .. child_key end
local function dedupe_member(name, key) return name .. NUL .. key end
-- Waiting members (see waiting_member in lib/rows.lua): the FIFO ordinal
-- zero-padded to WAITING_SEQ_WIDTH digits, then the job id.  Mirrors
-- store/keys.py WAITING_SEQ_WIDTH.
local WAITING_SEQ_WIDTH = 16
local WAITING_SEQ_ZEROS = '0000000000000000'
