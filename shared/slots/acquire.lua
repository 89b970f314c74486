-- Acquire one slot in every scope, or in none; optionally release another
-- holder first, in the same atomic step (a handoff: the slot freed goes to
-- this holder, never to whoever acquires in between).
-- KEYS[i]   the sorted set of scope i (member = holder, score = lease expiry, ms);
--           the first #ARGV-3 keys are acquired, any further ones only released
-- ARGV[1]   holder
-- ARGV[2]   lease TTL, ms
-- ARGV[3]   holder to remove from every key first, or '' for none
-- ARGV[3+i] limit of scope i
-- Returns {1, expiry_ms} when the holder now holds every scope, or {0, i} when
-- scope i is full (nothing was added anywhere; the release, if any, stands).
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local holder = ARGV[1]
local expiry = now + tonumber(ARGV[2])
local released = ARGV[3]
local n = #ARGV - 3

for _, key in ipairs(KEYS) do
  redis.call('ZREMRANGEBYSCORE', key, '-inf', now)
  if released ~= '' then
    redis.call('ZREM', key, released)
  end
end

-- A holder already in a scope keeps its place there: re-acquiring renews.
for i = 1, n do
  local key = KEYS[i]
  if not redis.call('ZSCORE', key, holder) then
    if redis.call('ZCARD', key) >= tonumber(ARGV[3 + i]) then
      return {0, i}
    end
  end
end

for i = 1, n do
  local key = KEYS[i]
  redis.call('ZADD', key, expiry, holder)
  -- The key lives exactly as long as its longest lease, so abandoned scopes
  -- disappear on their own.
  local last = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
  redis.call('PEXPIREAT', key, last[2])
end
return {1, expiry}
