-- An operator's hold request (SPEC §2.4). One round trip.
--
-- KEYS[1] the hold-request hash, KEYS[2] the registry, KEYS[3] the registry version, KEYS[4] the
-- join set, KEYS[5] the bench's join key, KEYS[6] its heartbeat key.
-- ARGV[1] the bench name, ARGV[2] the reason, ARGV[3] how long it lasts in ms (0: until released),
-- ARGV[4] '1' to refuse a bench that is not registered (a typo is told, not registered).
--
-- Returns the server time, or -1 when the bench is not registered and ARGV[4] refuses it.
--
-- A bench is known when the registry holds it, or one of its own two keys exists, the join key or
-- the heartbeat: it beat, as its own user (which may not register itself, SPEC §2.3) or as an
-- agent of the previous release (whose beat added it to the join set). A known bench asked to
-- hold is registered. The lapse is stamped on the server's clock, like every deadline fleet keeps.
local known = redis.call('SISMEMBER', KEYS[2], ARGV[1]) == 1
local beat = redis.call('EXISTS', KEYS[5], KEYS[6]) > 0
if ARGV[4] == '1' and not known and not beat then return -1 end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local request = { reason = ARGV[2] }
local ms = tonumber(ARGV[3])
if ms > 0 then request['until'] = now + ms end
redis.call('HSET', KEYS[1], ARGV[1], cjson.encode(request))
if not known and redis.call('SADD', KEYS[2], ARGV[1]) == 1 then
  if redis.call('INCR', KEYS[3]) == 1 then redis.call('SET', KEYS[3], string.format('%d', now * 1000)) end
end
return now
