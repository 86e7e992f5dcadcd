-- A power-off request for a bench's agent (SPEC §4.10). One round trip.
--
-- KEYS[1] the bench's off request.
-- ARGV[1] the nonce, ARGV[2] how long the request stands in ms (the operation's timeout).
--
-- Stamped with the server's clock and expiring on it (PXAT), like a beat: the request stands
-- exactly as long as the wrapper waits for its answer, so a bench that comes back later never
-- finds a stale one. A new request replaces the last: only the newest nonce is ever answered.
-- Returns the server ms of the request.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local untl = now + tonumber(ARGV[2])
local request = string.format('{"v":1,"nonce":%s,"at":%d,"until":%d}', cjson.encode(ARGV[1]), now, untl)
redis.call('SET', KEYS[1], request, 'PXAT', untl)
return now
