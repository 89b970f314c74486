-- Remove a holder from every scope. Removing an absent holder is a no-op.
-- KEYS[i]  the sorted set of scope i
-- ARGV[1]  holder
-- Returns how many scopes the holder was removed from.
local removed = 0
for _, key in ipairs(KEYS) do
  removed = removed + redis.call('ZREM', key, ARGV[1])
end
return removed
