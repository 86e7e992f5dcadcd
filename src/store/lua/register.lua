-- Registers benches (SPEC §2.3): their names in the registry, written by fleet's own users only.
-- One round trip.
--
-- KEYS[1] the registry, KEYS[2] the registry version. ARGV: the bench names.
-- Returns 1 or 0 per name: whether it was added. The version moves when one was, starting from
-- the server's time, so it never repeats after a wipe.
local added, any = {}, false
for i, name in ipairs(ARGV) do
  added[i] = redis.call('SADD', KEYS[1], name)
  if added[i] == 1 then any = true end
end
if any then
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  if redis.call('INCR', KEYS[2]) == 1 then redis.call('SET', KEYS[2], string.format('%d', now * 1000)) end
end
return added
