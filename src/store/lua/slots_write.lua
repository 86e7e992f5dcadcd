-- Writes slot statuses, fenced (SPEC §5.1). One round trip.
-- KEYS[1] the group's fence, KEYS[2..] the status keys. ARGV[1] the writer's token ('' for an
-- unfenced writer), ARGV[2..] the statuses, in the order of the keys.
if ARGV[1] ~= '' and redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
for i = 2, #KEYS do redis.call('SET', KEYS[i], ARGV[i]) end
return 1
