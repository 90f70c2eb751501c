-- Owed follow-up work.  A script that would exceed its bounded budget (keep
-- pruning of a huge group, flipping the rows of a huge flow) does a first
-- bounded slice, records the rest here, and returns it as the last element of
-- its reply: {'!owed', kind, a, b, c, kind, a, b, c, ...} (a nested array, so it
-- cannot be mistaken for a reply value).  The Python store finishes the work
-- with further bounded calls before the operation returns.
local OWED = {}

local function owe(kind, a, b, c)
  OWED[#OWED + 1] = { kind, a or '', b or '', c or '' }
end

local function with_owed(reply)
  LIMITS.flush()
  if #OWED == 0 then return reply end
  local owed = { '!owed' }
  for _, o in ipairs(OWED) do
    for k = 1, 4 do owed[#owed + 1] = o[k] end
  end
  reply[#reply + 1] = owed
  return reply
end
