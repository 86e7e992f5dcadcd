-- Gives the lease up on a clean stop, so a follower takes over at once (SPEC §5.1).
-- KEYS[1] the lease. ARGV[1] '<holder> <token>'. Returns 1 when it was ours.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  return 1
end
return 0
