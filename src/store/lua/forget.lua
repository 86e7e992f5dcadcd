-- Removes benches from the registry with their hold requests (SPEC §2.4). One round trip.
--
-- KEYS[1] the registry, KEYS[2] the registry version, KEYS[3] the hold-request hash, KEYS[4] the
-- last-seen hash.
-- ARGV: the bench names. Returns 1 or 0 per name: whether it was registered.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local removed, any = {}, false
for i, name in ipairs(ARGV) do
  removed[i] = redis.call('SREM', KEYS[1], name)
  redis.call('HDEL', KEYS[3], name)
  redis.call('HDEL', KEYS[4], name)
  if removed[i] == 1 then any = true end
end
if any then
  if redis.call('INCR', KEYS[2]) == 1 then redis.call('SET', KEYS[2], string.format('%d', now * 1000)) end
end
return removed
