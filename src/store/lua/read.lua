-- The fleet read (SPEC §2.5): every bench's heartbeat value, the remaining TTL of each key that
-- exists, and each bench's hold request, with the server's TIME, in one round trip.
--
-- KEYS[1] the registry.
-- ARGV[1] the heartbeat key prefix, ARGV[2] the hold-request key prefix (both named by the key
-- module), ARGV[3..] the benches to read; with none, every member of the registry.
--
-- A script runs with the clock frozen for expiry, so a value and its PTTL always agree: a key
-- never expires between the two reads. PTTL is asked of every key that exists, because a key
-- without a TTL is a defect that must read DOWN, and only PTTL can see it.
local names
if #ARGV > 2 then
  names = {}
  for i = 3, #ARGV do names[#names + 1] = ARGV[i] end
else
  names = redis.call('SMEMBERS', KEYS[1])
end
local t = redis.call('TIME')
local beats, pttls, holds = {}, {}, {}
-- MGET in chunks: unpack() is bounded by the Lua C stack (8000 values).
local chunk = 4000
for first = 1, #names, chunk do
  local last = math.min(first + chunk - 1, #names)
  local hb, hr = {}, {}
  for i = first, last do
    hb[#hb + 1] = ARGV[1] .. names[i]
    hr[#hr + 1] = ARGV[2] .. names[i]
  end
  local v = redis.call('MGET', unpack(hb))
  local h = redis.call('MGET', unpack(hr))
  for j = 1, #hb do
    local i = first + j - 1
    beats[i] = v[j]
    holds[i] = h[j]
    if v[j] then pttls[i] = redis.call('PTTL', hb[j]) else pttls[i] = -2 end
  end
end
return { t[1], t[2], names, beats, pttls, holds }
