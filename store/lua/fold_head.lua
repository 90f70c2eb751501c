-- fold_head: move the rows single inserts left in the chunked sets' head into
-- their chunks (lib/chunks.lua).  Every script that reads the chunks does
-- this itself; reclaim_indexes calls it before deleting an index's sets, so
-- that no row flagged for that index reaches its chunks afterwards.
--
-- KEYS[1]  the store's hash tag
-- Reply: 1
cz_fold()
return 1
