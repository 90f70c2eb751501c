-- flip_flow_rows: continue flipping a settled parent's pending rows to
-- cancelled / not cascaded (owed work of a cancel or fail-fast settle).
--
-- KEYS[1]  the store's hash tag
-- ARGV[1]  now   ARGV[2]  flow id   ARGV[3]  the last child key already examined
--
-- Reply: the last child key examined when more rows may remain, else ''.
local _, last = flip_pending_rows(ARGV[2], ARGV[3], tonumber(ARGV[1]))
return last or ''
