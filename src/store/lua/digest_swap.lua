-- Replaces a slot's last-claim digest if it is still the one the caller read (SPEC §3.5: an
-- operator's reset of the failure streak). One round trip; the digest keeps its TTL, if any.
--
-- KEYS[1] the slot's last-claim digest. ARGV[1] the digest as read, ARGV[2] the new one.
-- Returns 1 when swapped, 0 when the digest moved since it was read (read again and retry).
if (redis.call('GET', KEYS[1]) or '') ~= ARGV[1] then return 0 end
redis.call('SET', KEYS[1], ARGV[2], 'KEEPTTL')
return 1
