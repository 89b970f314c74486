-- Acquire one slot in every scope, or in none.
-- KEYS[i]  the sorted set of scope i (member = holder, score = lease expiry, ms)
-- ARGV[1]  holder
-- ARGV[2]  lease TTL, ms
-- ARGV[2+i] limit of scope i
-- Returns {1, expiry_ms} when the holder now holds every scope, or {0, i} when
-- scope i is full (nothing was added anywhere).
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local holder = ARGV[1]
local expiry = now + tonumber(ARGV[2])

for _, key in ipairs(KEYS) do
  redis.call('ZREMRANGEBYSCORE', key, '-inf', now)
end

-- A holder already in a scope keeps its place there: re-acquiring renews.
for i, key in ipairs(KEYS) do
  if not redis.call('ZSCORE', key, holder) then
    if redis.call('ZCARD', key) >= tonumber(ARGV[2 + i]) then
      return {0, i}
    end
  end
end

for _, key in ipairs(KEYS) do
  redis.call('ZADD', key, expiry, holder)
  -- The key lives exactly as long as its longest lease, so abandoned scopes
  -- disappear on their own.
  local last = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
  redis.call('PEXPIREAT', key, last[2])
end
return {1, expiry}
