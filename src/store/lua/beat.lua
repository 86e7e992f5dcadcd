-- One beat: the bench's own word that it is there (SPEC §2.4). One round trip.
--
-- KEYS[1] the heartbeat key, KEYS[2] the hold-request hash, KEYS[3] the registry,
-- KEYS[4] the registry version.
-- ARGV[1] the bench name, ARGV[2] the TTL in ms, ARGV[3] an explicit hold ('' for none),
-- ARGV[4] the load ('' for unknown), ARGV[5] the cores ('' for unknown).
--
-- The server's clock stamps the beat (TIME) and the expiry is that stamp plus the TTL (PXAT), so
-- the bench's own clock is never part of the promise and the key expires exactly at the
-- deadline its value states (PX would start from the SET's own instant, a little later). A TTL
-- of 0 expires at once: the key is deleted, since a deadline of now is no expiry to set. With no
-- explicit hold, the beat carries the operator's hold request while it has not lapsed, so HELD
-- always means the bench said it.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ttl = tonumber(ARGV[2])
local hold = ARGV[3]
if hold == '' then
  hold = false
  local raw = redis.call('HGET', KEYS[2], ARGV[1])
  if raw then
    local ok, request = pcall(cjson.decode, raw)
    if ok and type(request) == 'table' and type(request.reason) == 'string' then
      if type(request['until']) == 'number' and request['until'] <= now then
        redis.call('HDEL', KEYS[2], ARGV[1])
      else
        hold = request.reason
      end
    end
  end
end
if redis.call('SADD', KEYS[3], ARGV[1]) == 1 then
  -- A new member: readers holding the registry read it again. A version that starts from the
  -- server's time never repeats after the store is wiped.
  if redis.call('INCR', KEYS[4]) == 1 then redis.call('SET', KEYS[4], string.format('%d', now * 1000)) end
end
if ttl <= 0 then
  redis.call('DEL', KEYS[1])
else
  local beat = { v = 1, at = now, ttl = ttl }
  if hold then beat.hold = hold end
  if ARGV[4] ~= '' then beat.load = tonumber(ARGV[4]) end
  if ARGV[5] ~= '' then beat.cores = tonumber(ARGV[5]) end
  redis.call('SET', KEYS[1], cjson.encode(beat), 'PXAT', now + ttl)
end
return { now, hold }
