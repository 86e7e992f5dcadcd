-- Reads a group's claims (SPEC §4.3): every claim in the group's index, with the server's TIME,
-- and the slots' operation records. One round trip. A group holds its live claims and its
-- terminal ones until they are collected.
--
-- KEYS[1] the group's claim index, KEYS[2] the group's operation records. ARGV[1] the claim key
-- prefix.
local names = redis.call('ZRANGE', KEYS[1], 0, -1)
local values = {}
for first = 1, #names, 4000 do
  local last = math.min(first + 3999, #names)
  local keys = {}
  for i = first, last do keys[#keys + 1] = ARGV[1] .. names[i] end
  local v = redis.call('MGET', unpack(keys))
  for j = 1, #keys do values[first + j - 1] = v[j] end
end
return { redis.call('TIME'), names, values, redis.call('HGETALL', KEYS[2]) }
