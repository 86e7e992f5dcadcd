-- Removes benches from the registry and the join set, with their join keys, heartbeat keys, hold
-- requests and last-seen times (SPEC §2.4). One round trip.
--
-- KEYS[1] the registry, KEYS[2] the registry version, KEYS[3] the hold-request hash, KEYS[4] the
-- last-seen hash (written by beats before the join keys), KEYS[5] the join set, KEYS[5 + i] the
-- join key of the i-th name, KEYS[5 + n + i] its heartbeat key (n names).
--
-- The heartbeat goes with the join key: a name of the join set counts while either exists (SPEC
-- §2.3), and under the previous release's ACL file any bench's user may put a forgotten name back
-- in the set, so a heartbeat left to run out would let another bench register it again until then.
-- ARGV: the bench names. Returns 1 or 0 per name: whether it was registered (in the registry, or
-- in the join set with its join key).
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local removed, any = {}, false
for i, name in ipairs(ARGV) do
  local proven = redis.call('DEL', KEYS[5 + i]) == 1
  redis.call('DEL', KEYS[5 + #ARGV + i])
  local joined = redis.call('SREM', KEYS[5], name) == 1
  local registered = redis.call('SREM', KEYS[1], name) == 1
  redis.call('HDEL', KEYS[3], name)
  redis.call('HDEL', KEYS[4], name)
  removed[i] = (registered or (joined and proven)) and 1 or 0
  if joined or registered then any = true end
end
if any then
  if redis.call('INCR', KEYS[2]) == 1 then redis.call('SET', KEYS[2], string.format('%d', now * 1000)) end
end
return removed
