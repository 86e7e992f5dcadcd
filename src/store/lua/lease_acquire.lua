-- Takes or renews the leader lease (SPEC §5.1). One round trip.
--
-- KEYS[1] the lease, KEYS[2] the epoch. ARGV[1] the holder's id, ARGV[2] the lease (ms),
-- ARGV[3] the token the holder believes it has ('' when it holds none).
--
-- Returns {1, token} when the caller holds the lease (taken now, or renewed), {0, holder} when
-- another holds it. A new leadership takes a new token: above the epoch, and at least the
-- server's time in µs, and the epoch moves to it. A failover can roll the epoch back (its INCR
-- lost with the primary), and a wipe loses it: the time floor still puts the token above every
-- token issued before, as long as the new primary's clock is not behind the old one's by more
-- than the time between two leaderships (SPEC §5.1).
local cur = redis.call('GET', KEYS[1])
if cur then
  if ARGV[3] ~= '' and cur == ARGV[1] .. ' ' .. ARGV[3] then
    redis.call('PEXPIRE', KEYS[1], ARGV[2])
    return { 1, ARGV[3] }
  end
  return { 0, cur }
end
local token = redis.call('INCR', KEYS[2])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
if now > token then
  token = now
  redis.call('SET', KEYS[2], string.format('%d', token))
end
local text = string.format('%d', token)
redis.call('SET', KEYS[1], ARGV[1] .. ' ' .. text, 'PX', ARGV[2])
return { 1, text }
