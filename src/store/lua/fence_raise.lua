-- Raises a group's fence to a new leader's token (SPEC §5.1). One round trip.
-- KEYS[1] the fence. ARGV[1] the token.
-- Returns 1 when the fence now holds the token, 0 when a newer leader's token is already there.
local cur = redis.call('GET', KEYS[1])
if cur == ARGV[1] then return 1 end
if cur and tonumber(cur) > tonumber(ARGV[1]) then return 0 end
redis.call('SET', KEYS[1], ARGV[1])
return 1
