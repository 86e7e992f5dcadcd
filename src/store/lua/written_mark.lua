-- Sets the leader's written mark after a pass's writes (SPEC §5.3). One round trip.
-- KEYS[1] the lease, KEYS[2] the written mark. ARGV[1] the lease's value while this leader holds
-- it (`<holder> <token>`), ARGV[2] the mark.
-- Returns 1 when set, 0 when the lease is not this leader's (a deposed leader sets nothing, so a
-- successor never mistakes its late mark for a lost write).
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('SET', KEYS[2], ARGV[2])
return 1
