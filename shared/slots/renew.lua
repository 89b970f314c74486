-- Extend a lease in every scope, or report it lost.
-- KEYS[i]  the sorted set of scope i
-- ARGV[1]  holder
-- ARGV[2]  lease TTL, ms
-- Returns {1, expiry_ms} when renewed, or {0, i} when the lease had expired
-- (or was removed by a rebuild) in scope i. A lost lease is then removed from
-- every scope, so it holds nothing rather than part of what it held.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local holder = ARGV[1]
local expiry = now + tonumber(ARGV[2])

local lost = 0
for i, key in ipairs(KEYS) do
  redis.call('ZREMRANGEBYSCORE', key, '-inf', now)
  if lost == 0 and not redis.call('ZSCORE', key, holder) then
    lost = i
  end
end

if lost ~= 0 then
  for _, key in ipairs(KEYS) do
    redis.call('ZREM', key, holder)
  end
  return {0, lost}
end

for _, key in ipairs(KEYS) do
  redis.call('ZADD', key, 'XX', expiry, holder)
  local last = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
  redis.call('PEXPIREAT', key, last[2])
end
return {1, expiry}
