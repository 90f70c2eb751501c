-- Key builders.  Every key of one store lives under the hash tag passed in KEYS[1]
-- (the string "{<prefix>}"), so a store occupies a single Redis Cluster slot.
-- Two user strings inside one key or member are joined with NUL, because ids,
-- names, queues and dedupe keys may all contain ":".  Mirrors store/keys.py.
local B = KEYS[1]
local NUL = '\0'

local K_SEQ = B .. ':seq'
local K_ALL = B .. ':all'
local K_ACTIVE = B .. ':active'
local K_COUNTS = B .. ':counts'
local K_PAUSED = B .. ':paused'
local K_DEDUPE_WINDOWS = B .. ':dedupes:window'
local K_DEDUPE_PENDING = B .. ':dedupes:pending'
local K_KEEPAGE = B .. ':keepage'
local K_WAKE = B .. ':wake'
local K_OUTBOX = B .. ':outbox'
local K_OUTBOX_SEQ = B .. ':outbox:seq'
local K_FLOW_OWES = B .. ':flow:owes'
local K_STATS = B .. ':stats:'
local K_SCHEDULES = B .. ':schedules'
local K_QNAMES = B .. ':qnames'
local K_FLOW_PENDING = B .. ':flow:pending'
local K_FLOW_CASCADE = B .. ':flow:cascade'
local K_FLOW_GC = B .. ':flow:gc'

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
local function flow_member(flow_id, child_key) return flow_id .. NUL .. child_key end
