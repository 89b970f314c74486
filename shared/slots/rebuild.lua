-- Replace every holder of one scope with the given set.
-- KEYS[1]  the sorted set of the scope
-- ARGV[1]  lease TTL given to every holder, ms
-- ARGV[2..] holders
-- Returns the number of holders the scope now has.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local expiry = now + tonumber(ARGV[1])

redis.call('DEL', KEYS[1])
for i = 2, #ARGV do
  redis.call('ZADD', KEYS[1], expiry, ARGV[i])
end
if #ARGV > 1 then
  redis.call('PEXPIREAT', KEYS[1], expiry)
end
return redis.call('ZCARD', KEYS[1])
