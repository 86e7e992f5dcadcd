-- One beat: the bench's own word that it is there (SPEC §2.4). One round trip.
--
-- KEYS[1] the heartbeat key, KEYS[2] the hold-request key, KEYS[3] the registry.
-- ARGV[1] the bench name, ARGV[2] the TTL in ms, ARGV[3] an explicit hold ('' for none),
-- ARGV[4] the load ('' for unknown), ARGV[5] the cores ('' for unknown).
--
-- The server's clock stamps the beat (TIME) and the server starts the TTL on receipt (PX), so the
-- bench's own clock is never part of the promise. A TTL of 0 expires at once: the key is
-- deleted, since PX 0 is not a valid expiry. With no explicit hold, the beat carries the
-- operator's hold request, so HELD always means the bench said it.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ttl = tonumber(ARGV[2])
local hold = ARGV[3]
if hold == '' then
  hold = redis.call('GET', KEYS[2])
end
redis.call('SADD', KEYS[3], ARGV[1])
if ttl <= 0 then
  redis.call('DEL', KEYS[1])
else
  local beat = { v = 1, at = now, ttl = ttl }
  if hold then beat.hold = hold end
  if ARGV[4] ~= '' then beat.load = tonumber(ARGV[4]) end
  if ARGV[5] ~= '' then beat.cores = tonumber(ARGV[5]) end
  redis.call('SET', KEYS[1], cjson.encode(beat), 'PX', ttl)
end
return { now, hold }
