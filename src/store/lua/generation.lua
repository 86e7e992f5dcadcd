-- The store's generation marker and the wipe record (SPEC §5.2, §5.3). One round trip.
--
-- KEYS[1] the generation marker, KEYS[2] the wipe record, KEYS[3] the catalog.
-- ARGV[1] a fresh marker, ARGV[2] the blind grace (ms), ARGV[3] the adoption window after it (ms).
--
-- When the marker is missing the store lost its data (or this is its first start): the fresh
-- marker is set, and with it the wipe record, `<blind until ms> <adopt until ms>` on the server's
-- clock, expiring when adoption ends. Every leader reads the record, so a leader that takes over
-- during the grace keeps it. Returns {marker, record or '', 1 when the catalog is there}: a
-- leader publishes it again as soon as it is missing (a wipe takes it too), so the views never
-- stay dead.
if redis.call('SET', KEYS[1], ARGV[1], 'NX') then
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  local blind = now + tonumber(ARGV[2])
  local adopt = blind + tonumber(ARGV[3])
  redis.call('SET', KEYS[2], string.format('%d %d', blind, adopt), 'PX', math.max(1, adopt - now))
end
return { redis.call('GET', KEYS[1]), redis.call('GET', KEYS[2]) or '', redis.call('EXISTS', KEYS[3]) }
