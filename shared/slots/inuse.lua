-- Count the unexpired holders of one scope, by the Redis clock.
-- KEYS[1]  the sorted set of the scope
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
return redis.call('ZCOUNT', KEYS[1], '(' .. now, '+inf')
