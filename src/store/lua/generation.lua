-- The store's generation marker and the wipe record (SPEC §5.2, §5.3). One round trip.
--
-- KEYS[1] the generation marker, KEYS[2] the wipe record, KEYS[3] the catalog, KEYS[4] the
-- leader's written mark.
-- ARGV[1] a fresh marker, ARGV[2] the blind grace (ms), ARGV[3] the adoption window after it (ms),
-- ARGV[4] the written mark this leader set after its last pass ('' when it has none to expect).
--
-- When the marker is missing the store lost its data (or this is its first start): the fresh
-- marker is set, and with it the wipe record, `<blind until ms> <adopt until ms>` on the server's
-- clock, expiring when adoption ends. Every leader reads the record, so a leader that takes over
-- during the grace keeps it. Returns {marker, record or '', 1 when the catalog is there}: a
-- leader publishes it again as soon as it is missing (a wipe takes it too), so the views never
-- stay dead.
--
-- When the written mark is not the one the leader set after its last pass, the store lost that
-- pass's writes (Redis replicates in the order it executes, so a store that kept the mark kept
-- every write before it): the same wipe record is written, unless a later one stands. Returns
-- {marker, record or '', 1 when the catalog is there, 1 when the store rolled back}.
local function wipe()
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  local blind = now + tonumber(ARGV[2])
  local adopt = blind + tonumber(ARGV[3])
  local cur = redis.call('GET', KEYS[2])
  if cur then
    local b, a = string.match(cur, '^(%d+) (%d+)$')
    if a and tonumber(a) >= adopt then return end
  end
  redis.call('SET', KEYS[2], string.format('%d %d', blind, adopt), 'PX', math.max(1, adopt - now))
end
local rolled = 0
if redis.call('SET', KEYS[1], ARGV[1], 'NX') then
  wipe()
elseif ARGV[4] ~= '' and redis.call('GET', KEYS[4]) ~= ARGV[4] then
  rolled = 1
  wipe()
end
return { redis.call('GET', KEYS[1]), redis.call('GET', KEYS[2]) or '', redis.call('EXISTS', KEYS[3]), rolled }
